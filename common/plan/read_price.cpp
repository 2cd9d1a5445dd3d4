#include "common/plan/read_price.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <exception>
#include <utility>
#include <string>

#include "common/error.h"
#include "common/read_window.h"

namespace k3::plan {

ReadModel ReadModelOf(const PlanModel& model, const MemoryPlan& plan) {
  const ModelConfig& c = model.cfg;
  ReadModel r;
  r.moe_layers = c.moe_layers();
  r.experts = c.num_experts;
  r.top_k = c.top_k;
  r.expert_bytes = WidenedBytes(model.expert_bytes);  // the fetcher reads each expert widened to 4096 bounds
  r.expert_slots = plan.expert_slots;
  for (int64_t l = 0; l < static_cast<int64_t>(model.trunk_bytes.size()); ++l)
    if (!std::binary_search(plan.pinned_layers.begin(), plan.pinned_layers.end(), static_cast<int>(l)))
      // A coded trunk is read for whole streamed layers; pieces read the release (pipeline.md).
      r.streamed_trunk += model.coded_trunk_bytes.empty() || plan.trunk_pieced
                              ? model.trunk_bytes[static_cast<size_t>(l)]
                              : model.coded_trunk_bytes[static_cast<size_t>(l)];
  if (!plan.lm_head_resident) r.streamed_trunk += model.lm_head_bytes;
  return r;
}

double DistinctExperts(int64_t experts, int64_t top_k, int64_t tokens) {
  if (experts <= 0 || tokens <= 0) return 0;
  const double q = static_cast<double>(std::clamp<int64_t>(top_k, 0, experts)) / static_cast<double>(experts);
  // expm1/log1p keep small T exact where 1 - (1 - q)^T would cancel.
  return -static_cast<double>(experts) * std::expm1(static_cast<double>(tokens) * std::log1p(-q));
}

double PassBytes(const ReadModel& r, int64_t tokens) {
  const double all = static_cast<double>(r.moe_layers) * static_cast<double>(r.experts);
  const double cached = all > 0 ? std::min(1.0, static_cast<double>(r.expert_slots) / all) : 1.0;
  const double misses = static_cast<double>(r.moe_layers) * DistinctExperts(r.experts, r.top_k, tokens) * (1.0 - cached);
  return static_cast<double>(r.streamed_trunk) + misses * static_cast<double>(r.expert_bytes);
}

ReadPrice PriceAt(const ReadModel& r, int64_t chunk) {
  ReadPrice p;
  p.chunk = std::max<int64_t>(chunk, 1);
  p.per_generated_token = PassBytes(r, 1);
  p.per_chunk = PassBytes(r, p.chunk);
  p.per_prompt_token = p.per_chunk / static_cast<double>(p.chunk);
  p.experts_per_layer = DistinctExperts(r.experts, r.top_k, p.chunk);
  return p;
}

double PromptBytes(const ReadModel& r, int64_t chunk, int64_t prompt_tokens) {
  if (prompt_tokens <= 0) return 0;
  chunk = std::max<int64_t>(chunk, 1);
  const int64_t full = prompt_tokens / chunk, rest = prompt_tokens % chunk;
  return static_cast<double>(full) * PassBytes(r, chunk) + (rest > 0 ? PassBytes(r, rest) : 0.0);
}

TimePrice TimeAt(const ReadModel& r, int64_t chunk, int64_t prompt_tokens, double bytes_per_second) {
  TimePrice t;
  if (bytes_per_second <= 0) return t;
  t.seconds_per_token = PassBytes(r, 1) / bytes_per_second;
  t.first_token_seconds = PromptBytes(r, chunk, prompt_tokens) / bytes_per_second;
  return t;
}

double ParseDiskRate(const std::string& text) {
  const std::string bad = "--disk-rate: '" + text + "' is not a rate (3.2GB/s, 800MB/s, 1.5GiB/s or bytes per second)";
  std::string s;
  for (char ch : text)
    if (!std::isspace(static_cast<unsigned char>(ch))) s.push_back(ch);
  if (s.size() >= 2 && s.compare(s.size() - 2, 2, "/s") == 0) s.resize(s.size() - 2);
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(s, &used);
  } catch (const std::exception&) {
    throw UsageError(bad);
  }
  const std::string unit = s.substr(used);
  double scale = 0;
  const std::pair<const char*, double> units[] = {{"", 1},        {"B", 1},        {"kB", 1e3},  {"KB", 1e3},
                                                   {"MB", 1e6},    {"GB", 1e9},     {"TB", 1e12}, {"KiB", 1024.0},
                                                   {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1024.0 * (1 << 30)}};
  for (const auto& [name, f] : units)
    if (unit == name) scale = f;
  if (scale == 0 || !(v > 0) || !std::isfinite(v * scale)) throw UsageError(bad);
  return v * scale;
}

}  // namespace k3::plan
