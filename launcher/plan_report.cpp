#include "launcher/plan_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "common/error.h"

namespace k3::launch {

PlanPrice PricePlan(const plan::PlanModel& model, int64_t budget, const plan::PlanOptions& po,
                    const plan::MemoryPlan& p, const PriceQuery& q) {
  PlanPrice out;
  out.read = plan::ReadModelOf(model, p);
  out.at_chunk = plan::PriceAt(out.read, p.prefill_chunk);
  out.floor_chunk = std::min(p.prefill_chunk_cap, plan::kFloorChunk);
  out.at_floor_chunk = out.at_chunk;
  if (out.floor_chunk != p.prefill_chunk) {
    const plan::MemoryPlan f = plan::MakePlanAtChunk(model, budget, po, out.floor_chunk);
    out.at_floor_chunk = plan::PriceAt(plan::ReadModelOf(model, f), out.floor_chunk);
  }
  out.prompt_bytes = plan::PromptBytes(out.read, p.prefill_chunk, q.prompt_tokens);
  out.time = plan::TimeAt(out.read, p.prefill_chunk, q.prompt_tokens, q.disk_rate);
  return out;
}

std::string DecimalBytes(double bytes) {
  const char* units[] = {"B", "kB", "MB", "GB", "TB", "PB"};
  int u = 0;
  while (std::fabs(bytes) >= 999.5 && u < 5) {
    bytes /= 1000;
    ++u;
  }
  char b[32];
  if (u == 0) std::snprintf(b, sizeof b, "%.0f B", bytes);
  else std::snprintf(b, sizeof b, std::fabs(bytes) >= 99.95 ? "%.0f %s" : std::fabs(bytes) >= 9.995 ? "%.1f %s" : "%.2f %s",
                     bytes, units[u]);
  return b;
}

std::string ChunkLine(const plan::PlanOptions& po, const plan::MemoryPlan& p) {
  std::string why;
  if (po.prefill_chunk > 0 && p.prefill_chunk_cap > p.prefill_chunk_fits)  // the cap asked for more than fits
    why = "; prefill_chunk " + std::to_string(po.prefill_chunk) + " capped: " + std::to_string(p.prefill_chunk_fits) +
          " is the most that fits the budget";
  else if (p.prefill_chunk == p.prefill_chunk_cap)
    why = po.prefill_chunk > 0 && po.prefill_chunk < po.context ? "; the cap prefill_chunk " + std::to_string(po.prefill_chunk)
                                                                : "; the whole context";
  else
    why = "; the cheapest generated + prompt token of those that fit (up to " + std::to_string(p.prefill_chunk_fits) + ")";
  char row[32];
  std::snprintf(row, sizeof row, "%.1f KiB", static_cast<double>(p.scratch_row) / 1024);
  return "prefill chunk: " + std::to_string(p.prefill_chunk) + " tokens, scratch " + FormatBytes(p.scratch) + " (" + row +
         " per token)" + why + "\n";
}

std::string PriceLines(const plan::MemoryPlan& p, const PlanPrice& price, const PriceQuery& q) {
  const plan::ReadPrice& r = price.at_chunk;
  const double trunk = static_cast<double>(price.read.streamed_trunk);
  std::string s = "read per generated token: " + DecimalBytes(r.per_generated_token) + " (streamed trunk " +
                  DecimalBytes(trunk) + ", experts " + DecimalBytes(r.per_generated_token - trunk) + ")\n";
  char e[64];
  std::snprintf(e, sizeof e, "%.1f", r.experts_per_layer);
  s += "read per prompt token: " + DecimalBytes(r.per_prompt_token) + " at chunk " + std::to_string(p.prefill_chunk) +
       " (a chunk asks for " + e + " of " + std::to_string(price.read.experts) + " experts per MoE layer: " +
       DecimalBytes(r.per_chunk - trunk) + " of experts + " + DecimalBytes(trunk) + " of trunk per chunk)\n";
  if (price.floor_chunk != p.prefill_chunk)
    s += "at chunk " + std::to_string(price.floor_chunk) + " instead: " +
         DecimalBytes(price.at_floor_chunk.per_generated_token) + " per generated token, " +
         DecimalBytes(price.at_floor_chunk.per_prompt_token) + " per prompt token\n";
  if (q.prompt_tokens > 0)
    s += "prompt of " + std::to_string(q.prompt_tokens) + " tokens: " + DecimalBytes(price.prompt_bytes) + " read\n";
  if (q.disk_rate > 0) {
    char t[256];
    std::snprintf(t, sizeof t, "at %s/s (%s): %.3g s per generated token", DecimalBytes(q.disk_rate).c_str(),
                  q.rate_source.c_str(), price.time.seconds_per_token);
    s += t;
    if (q.prompt_tokens > 0) {
      std::snprintf(t, sizeof t, ", first token after %.4g s", price.time.first_token_seconds);
      s += t;
    }
    s += " (reads only)\n";
  }
  return s;
}

nlohmann::json PlanJson(const std::string& model_dir, const plan::MemoryPlan& p, const plan::PlanOptions& po,
                        const PlanPrice& price, const PriceQuery& q) {
  nlohmann::json j;
  j["model"] = model_dir;
  j["budget"] = p.budget;
  j["floor"] = p.floor;
  j["total"] = p.total;
  nlohmann::json regions = nlohmann::json::array();
  for (const plan::Region& r : p.regions())
    regions.push_back({{"process", r.process}, {"region", r.region}, {"bytes", r.bytes}, {"note", r.note}});
  j["regions"] = regions;
  j["pinned_layers"] = p.pinned_layers;
  j["lm_head_resident"] = p.lm_head_resident;
  j["embed_resident"] = p.embed_resident;
  j["expert_slots"] = p.expert_slots;
  j["ring_slots"] = p.ring_slots;
  j["ring_slot_bytes"] = p.ring_slot_bytes;
  j["prefill_chunk"] = {{"chunk", p.prefill_chunk},
                        {"cap", po.prefill_chunk},
                        {"fits", p.prefill_chunk_fits},
                        {"scratch_bytes", p.scratch},
                        {"scratch_bytes_per_token", p.scratch_row}};
  const plan::ReadPrice& r = price.at_chunk;
  nlohmann::json read = {{"per_generated_token", r.per_generated_token},
                         {"per_prompt_token", r.per_prompt_token},
                         {"per_chunk", r.per_chunk},
                         {"experts_per_moe_layer_per_chunk", r.experts_per_layer},
                         {"streamed_trunk", price.read.streamed_trunk},
                         {"floor_chunk", price.floor_chunk},
                         {"per_generated_token_at_floor_chunk", price.at_floor_chunk.per_generated_token},
                         {"per_prompt_token_at_floor_chunk", price.at_floor_chunk.per_prompt_token}};
  if (q.prompt_tokens > 0) {
    read["prompt_tokens"] = q.prompt_tokens;
    read["prompt_bytes"] = price.prompt_bytes;
  }
  j["read_bytes"] = read;
  if (q.disk_rate > 0) {
    nlohmann::json t = {{"disk_rate_bytes_per_second", q.disk_rate},
                        {"disk_rate_source", q.rate_source},
                        {"seconds_per_generated_token", price.time.seconds_per_token}};
    if (q.prompt_tokens > 0) t["first_token_seconds"] = price.time.first_token_seconds;
    j["seconds"] = t;
  }
  return j;
}

namespace {

std::string Fmt2(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.2f", v);
  return b;
}

struct CodedCase {
  bool fits = false;
  size_t pinned = 0;
  double per_token = 0;
};

CodedCase PriceCase(const plan::PlanModel& m, int64_t budget, const plan::PlanOptions& po) {
  CodedCase c;
  try {
    const plan::MemoryPlan p = plan::MakePlan(m, budget, po);
    c.fits = true;
    c.pinned = p.pinned_layers.size();
    c.per_token = plan::PriceAt(plan::ReadModelOf(m, p), p.prefill_chunk).per_generated_token;
  } catch (const Error&) {
  }
  return c;
}

std::string CaseText(const CodedCase& coded, const CodedCase& plain, size_t layers) {
  if (!coded.fits) return "below the coded plan's floor";
  return std::to_string(coded.pinned) + " of " + std::to_string(layers) + " layers pinned, " +
         DecimalBytes(coded.per_token) + " per generated token (uncoded: " + std::to_string(plain.pinned) +
         " pinned, " + DecimalBytes(plain.per_token) + ", " +
         (plain.per_token > 0 ? Fmt2(coded.per_token / plain.per_token) : std::string("-")) + "x)";
}

}  // namespace

std::string CodedLines(const plan::PlanModel& model, int64_t budget, const plan::PlanOptions& po,
                       const plan::MemoryPlan& p) {
  plan::PlanModel coded = model;
  plan::PlanModel plain = model;
  plain.coded_trunk_bytes.clear();
  const bool measured = !model.coded_trunk_bytes.empty();
  if (!measured) {
    for (int64_t b : model.trunk_bytes)  // each layer's runs padded to 4096, as packed
      coded.coded_trunk_bytes.push_back((static_cast<int64_t>(static_cast<double>(b) * kCodedRatioEstimate) + 4095) / 4096 * 4096);
  }
  const size_t layers = model.trunk_bytes.size();
  std::string out = measured ? "coded trunk (measured, the coded runs' sizes): "
                             : "coded trunk (ESTIMATE: " + Fmt2(kCodedRatioEstimate) +
                                   "x of each layer, the ratio measured on trained weights; no coded trunk given): ";
  out += CaseText(PriceCase(coded, budget, po), PriceCase(plain, budget, po), layers) + "\n";
  if (p.trunk_pieced) {
    plan::PlanOptions whole = po;
    whole.trunk_piece = plan::kTrunkPieceLayer;
    out += "  layers stream in pieces here, which read the release's bytes; with trunk_piece = layer: " +
           CaseText(PriceCase(coded, budget, whole), PriceCase(plain, budget, whole), layers) + "\n";
  }
  return out;
}

}  // namespace k3::launch
