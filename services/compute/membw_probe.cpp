#include "membw_probe.h"

#include <algorithm>
#include <chrono>
#include <cstdint>

#include "common/word_sum.h"

namespace k3::compute {

double ProbeReadGBs(const std::vector<MemRegion>& regions) {
  const auto t0 = std::chrono::steady_clock::now();
  uint64_t total = 0, bytes = 0;
  for (const MemRegion& r : regions) {
    if (bytes >= kProbeMaxBytes) break;
    // 64-bit words; a tail of under 8 bytes is not worth reading.
    const int64_t n = static_cast<int64_t>(std::min<uint64_t>(r.bytes, kProbeMaxBytes - bytes) / 8);
    total += ParallelWordSum(static_cast<const uint64_t*>(r.data), n);
    bytes += static_cast<uint64_t>(n) * 8;
  }
  const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  volatile uint64_t sink = total;  // keeps the reads
  (void)sink;
  return sec > 0 ? static_cast<double>(bytes) / sec / 1e9 : 0.0;
}

}  // namespace k3::compute
