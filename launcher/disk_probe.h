// --disk-rate probe: a short O_DIRECT read of the model's own shards, so the dry run prices
// tokens in seconds on this disk (docs/memory-plan.md "Read price"). Reads at most
// kProbeBytes, spread over the largest shards, never through the page cache.
#pragma once
#include <cstdint>
#include <string>

namespace k3::launch {

inline constexpr int64_t kProbeBytes = 512ll << 20;

struct DiskProbe {
  double bytes_per_second = 0;
  int64_t bytes = 0;
  int files = 0;
};

// RuntimeFailure (exit 4) naming --disk-rate when the model has no shards or the filesystem
// refuses O_DIRECT.
DiskProbe ProbeDiskRate(const std::string& model_dir);

}  // namespace k3::launch
