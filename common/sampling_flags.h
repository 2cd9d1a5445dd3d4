// The sampling and scoring flags: one list of names and help texts, registered the same way on
// k3-launch (its option table, launcher/option_table.cpp), k3-compute --standalone and k3-server
// (llama.cpp / OpenAI names; TOML keys are the same with underscores).
#pragma once
#include <CLI/CLI.hpp>

#include <charconv>
#include <cstdint>
#include <random>
#include <string>
#include <system_error>

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

// A --seed value: the whole text one integer from 0 to 2^64-1 (CLI11 alone would wrap "-1").
inline CLI::Validator SeedValidator() {
  return CLI::Validator(
      [](std::string& v) {
        uint64_t x = 0;
        const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
        return ec == std::errc() && end == v.data() + v.size() ? "" : "must be an integer from 0 to 2^64-1";
      },
      "");
}

// The eight parameters of `s` (no seed): what k3-server takes as its requests' defaults.
inline void AddSamplingParamFlags(CLI::App& app, ipc::compute::Sampling& s) {
  for (const SamplingParam& p : kSamplingParams) {
    if (p.real) app.add_option(FlagOfKey(p.key), s.*p.real, p.help)->capture_default_str();
    else app.add_option(FlagOfKey(p.key), s.*p.integer, p.help)->capture_default_str();
  }
}

struct SamplingFlags {
  ipc::compute::Sampling sampling;
  int32_t logprobs = -1;
  bool perplexity = false;
  CLI::App* app = nullptr;
  // True when the named flag (e.g. "--top-k") was given on the command line.
  bool Given(const char* name) const { return app->get_option(name)->count() > 0; }
};

// The parameters, --seed, --logprobs and --perplexity (k3-compute --standalone).
inline void AddSamplingFlags(CLI::App& app, SamplingFlags& f) {
  f.app = &app;
  AddSamplingParamFlags(app, f.sampling);
  app.add_option("--seed", f.sampling.seed, std::string(kSeedHelp) + " (default: a random one)")
      ->check(SeedValidator());
  app.add_option("--logprobs", f.logprobs, kLogprobsHelp);
  app.add_flag("--perplexity", f.perplexity, kPerplexityHelp);
}

// A seed for runs that name none (reported so the run can be repeated).
inline uint64_t RandomSeed() {
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ rd();
}

}  // namespace k3
