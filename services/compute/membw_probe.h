// Read-bandwidth probe for benchmarks (--probe-membw): between decode steps, all threads sum
// the memory that holds the resident weights (the mapped shards standalone, the pinned and
// expert arenas in the pipeline). The host's memory bandwidth on a shared VM changes within
// seconds (docs/benchmarks.md), so a bound measured before and after a run can belong to
// another phase than the steps; a probe next to every step, over the same pages, does not.
#pragma once
#include <cstddef>
#include <vector>

namespace k3::compute {

struct MemRegion {
  const void* data = nullptr;
  size_t bytes = 0;
};

// One pass over every region (all OpenMP threads); returns GB/s (10^9 bytes per second).
double ProbeReadGBs(const std::vector<MemRegion>& regions);

}  // namespace k3::compute
