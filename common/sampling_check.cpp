#include "common/sampling_check.h"

#include <cmath>
#include <cstdio>

namespace k3 {
namespace {

std::string Num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

}  // namespace

std::string SamplingProblem(const ipc::compute::Sampling& s, int32_t logprobs) {
  auto bad = [](const char* flag, double v, const char* range) {
    return std::string(flag) + " " + Num(v) + ": must be " + range;
  };
  if (!std::isfinite(s.temperature) || s.temperature < 0)
    return bad("--temperature", s.temperature, ">= 0 (0 = greedy)");
  if (s.top_k < 0) return bad("--top-k", s.top_k, ">= 0 (0 = off)");
  if (!(s.top_p > 0 && s.top_p <= 1)) return bad("--top-p", s.top_p, "in (0, 1] (1 = off)");
  if (!(s.min_p >= 0 && s.min_p <= 1)) return bad("--min-p", s.min_p, "in [0, 1] (0 = off)");
  if (!std::isfinite(s.repeat_penalty) || s.repeat_penalty <= 0)
    return bad("--repeat-penalty", s.repeat_penalty, "> 0 (1 = off)");
  if (s.repeat_last_n < -1) return bad("--repeat-last-n", s.repeat_last_n, ">= -1 (-1 = the whole sequence, 0 = off)");
  if (!(s.presence_penalty >= -2 && s.presence_penalty <= 2))
    return bad("--presence-penalty", s.presence_penalty, "in [-2, 2]");
  if (!(s.frequency_penalty >= -2 && s.frequency_penalty <= 2))
    return bad("--frequency-penalty", s.frequency_penalty, "in [-2, 2]");
  if (logprobs < -1 || logprobs > kMaxLogprobs)
    return bad("--logprobs", logprobs, ("in [0, " + std::to_string(kMaxLogprobs) + "]").c_str());
  return "";
}

nlohmann::json SamplingJson(const ipc::compute::Sampling& s) {
  return {{"temperature", s.temperature},           {"top_k", s.top_k},
          {"top_p", s.top_p},                       {"min_p", s.min_p},
          {"repeat_penalty", s.repeat_penalty},     {"repeat_last_n", s.repeat_last_n},
          {"presence_penalty", s.presence_penalty}, {"frequency_penalty", s.frequency_penalty},
          {"seed", s.seed}};
}

}  // namespace k3
