// Sum of n 64-bit words with all OpenMP threads: the read-bandwidth loop shared by
// k3-bench-membw, k3-bench-kernels' baseline and compute's --probe-membw, so all three read
// memory the same way. Integer adds vectorise without reassociation flags; callers must use the
// result (print it, or store it to a volatile) so the reads are not optimised away.
// Includers compile with OpenMP (all of them do); without it the loop runs on one thread.
#pragma once
#include <cstdint>

namespace k3 {

inline uint64_t ParallelWordSum(const uint64_t* p, int64_t n) {
  uint64_t s = 0;
#pragma omp parallel for schedule(static) reduction(+ : s)
  for (int64_t i = 0; i < n; ++i) s += p[i];
  return s;
}

}  // namespace k3
