// The sampling and scoring flags, registered the same way on k3-launch and k3-compute
// --standalone (llama.cpp / OpenAI names; TOML keys are the same with underscores).
#pragma once
#include <CLI/CLI.hpp>

#include <charconv>
#include <cstdint>
#include <string>
#include <system_error>
#include <random>

#include "common/ipc/messages.h"

namespace k3 {

struct SamplingFlags {
  ipc::compute::Sampling sampling;
  int32_t logprobs = -1;
  bool perplexity = false;
  CLI::App* app = nullptr;
  // True when the named flag (e.g. "--top-k") was given on the command line.
  bool Given(const char* name) const { return app->get_option(name)->count() > 0; }
};

inline void AddSamplingFlags(CLI::App& app, SamplingFlags& f) {
  f.app = &app;
  ipc::compute::Sampling& s = f.sampling;
  app.add_option("--temperature", s.temperature, "sampling temperature, >= 0 (0, the default: greedy)");
  app.add_option("--top-k", s.top_k, "sample among the k most likely tokens (0, the default: off)");
  app.add_option("--top-p", s.top_p, "nucleus: the smallest set reaching this probability, (0, 1] (1: off)");
  app.add_option("--min-p", s.min_p, "drop tokens below min-p x the top probability, [0, 1] (0: off)");
  app.add_option("--repeat-penalty", s.repeat_penalty,
                 "divide positive (multiply negative) logits of recent ids, > 0 (1: off)");
  app.add_option("--repeat-last-n", s.repeat_last_n,
                 "ids --repeat-penalty looks back over (default 64; 0 off, -1 the whole sequence)");
  app.add_option("--presence-penalty", s.presence_penalty,
                 "subtracted once from each id already generated, [-2, 2] (0: off)");
  app.add_option("--frequency-penalty", s.frequency_penalty,
                 "subtracted per time an id was generated, [-2, 2] (0: off)");
  app.add_option("--seed", s.seed, "sampling seed, 0 to 2^64-1 (default: a random one, written to the report)")
      ->check(CLI::Validator(
          [](std::string& v) {
            uint64_t x = 0;
            const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
            return ec == std::errc() && end == v.data() + v.size() ? "" : "must be an integer from 0 to 2^64-1";
          },
          "UINT64"));
  app.add_option("--logprobs", f.logprobs,
                 "report each generated token's logprob and the N most likely ids, 0 to 100");
  app.add_flag("--perplexity", f.perplexity, "score the prompt teacher-forced: perplexity and nll_per_token");
}

// A seed for runs that name none (reported so the run can be repeated).
inline uint64_t RandomSeed() {
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ rd();
}

}  // namespace k3
