// Range checks of the sampling options (k3-launch, its TOML, k3-compute --standalone and
// compute's Generate): one rule set for every entry point. docs/sampling.md lists the ranges.
#pragma once
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "common/ipc/messages.h"

namespace k3 {

// The largest --logprobs N (alternatives per generated token).
inline constexpr int32_t kMaxLogprobs = 100;

// "" when `s` and `logprobs` (-1 = off) are in range, else one line naming the flag, e.g.
// "--top-p 1.5: must be in (0, 1]".
std::string SamplingProblem(const ipc::compute::Sampling& s, int32_t logprobs);

// The report's "sampling" object: every parameter, under its TOML key.
nlohmann::json SamplingJson(const ipc::compute::Sampling& s);

}  // namespace k3
