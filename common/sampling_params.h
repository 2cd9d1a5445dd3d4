// The sampling and scoring parameters: one list of names and help texts, which k3-launch's
// option table (launcher/option_table.cpp), k3-compute --standalone and k3-server register as
// flags (common/sampling_flags.h) and k3-server reads from requests (llama.cpp / OpenAI names;
// TOML keys are the same with underscores). No CLI11 here: it costs seconds per file that
// includes it.
#pragma once
#include <cstdint>
#include <random>
#include <string>
#include <string_view>

#include "common/ipc/messages.h"

namespace k3 {

// One sampling parameter of ipc::compute::Sampling: exactly one of the members is set.
struct SamplingParam {
  const char* key;  // "top_k"; the flag is "--top-k"
  const char* help;
  float ipc::compute::Sampling::*real = nullptr;
  int32_t ipc::compute::Sampling::*integer = nullptr;
};

// Ranges: common/sampling_check.h.
inline constexpr SamplingParam kSamplingParams[] = {
    {"temperature", "sampling temperature, >= 0 (0: greedy)", &ipc::compute::Sampling::temperature},
    {"top_k", "sample among the k most likely tokens (0: off)", nullptr, &ipc::compute::Sampling::top_k},
    {"top_p", "nucleus: the smallest set reaching this probability, (0, 1] (1: off)", &ipc::compute::Sampling::top_p},
    {"min_p", "drop tokens below min_p x the top probability, [0, 1] (0: off)", &ipc::compute::Sampling::min_p},
    {"repeat_penalty", "divide positive (multiply negative) logits of recent ids, > 0 (1: off)",
     &ipc::compute::Sampling::repeat_penalty},
    {"repeat_last_n", "ids the repeat penalty looks back over (0: off, -1: the whole sequence)", nullptr,
     &ipc::compute::Sampling::repeat_last_n},
    {"presence_penalty", "subtracted once from each id already generated, [-2, 2] (0: off)",
     &ipc::compute::Sampling::presence_penalty},
    {"frequency_penalty", "subtracted per time an id was generated, [-2, 2] (0: off)",
     &ipc::compute::Sampling::frequency_penalty},
};
inline constexpr const char* kSeedHelp = "sampling seed, 0 to 2^64-1 (written to the report)";
inline constexpr const char* kLogprobsHelp = "report each generated token's logprob and the N most likely ids, 0 to 100";
inline constexpr const char* kPerplexityHelp = "score the prompt teacher-forced: perplexity and nll_per_token";

// "top_k" -> "--top-k": every TOML key a_b is the flag --a-b.
inline std::string FlagOfKey(std::string_view key) {
  std::string f = "--";
  for (char c : key) f.push_back(c == '_' ? '-' : c);
  return f;
}

// A seed for runs that name none (reported so the run can be repeated).
inline uint64_t RandomSeed() {
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ rd();
}

}  // namespace k3
