// Read-bandwidth probe for benchmarks (--probe-membw): between decode steps, all threads sum
// the memory that holds the resident weights (the mapped shards standalone, the pinned and
// expert arenas in the pipeline). The host's memory bandwidth on a shared VM changes within
// seconds (docs/benchmarks.md), so a bound measured before and after a run can belong to
// another phase than the steps; a probe next to every step, over the same pages, does not.
// Meant for the all-resident budget, where the arenas are full: a never-written page of a
// shared-memory arena reads as the zero page and would inflate the figure.
#pragma once
#include <cstddef>
#include <vector>

namespace k3::compute {

struct MemRegion {
  const void* data = nullptr;
  size_t bytes = 0;
};

// At most this many bytes per pass, from the start of the regions in order: far larger than any
// cache, and a pass stays short even when the regions are a 128 GB arena or a real checkpoint's
// mapped shards (which a full pass would page in from disk).
constexpr size_t kProbeMaxBytes = size_t{4} << 30;

// One pass over the regions, capped at kProbeMaxBytes (all OpenMP threads); returns GB/s
// (10^9 bytes per second).
double ProbeReadGBs(const std::vector<MemRegion>& regions);

}  // namespace k3::compute
