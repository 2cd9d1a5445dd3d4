// The sampling and scoring flags, registered on a CLI11 app from the one list of
// common/sampling_params.h (k3-compute --standalone, k3-server; k3-launch through its option
// table).
#pragma once
#include <CLI/CLI.hpp>

#include <charconv>
#include <cstdint>
#include <string>
#include <system_error>

#include "common/sampling_params.h"

namespace k3 {

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

}  // namespace k3
