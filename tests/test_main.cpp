// The GoogleTest main of every unit and service test: k3-compute's OpenMP wait policy first
// (services/compute/omp_policy.h, a re-exec when the environment does not set one). In-process
// model tests run hundreds of short parallel regions per step; with libgomp's default long spin,
// a parallel ctest on 2 shared cores made them up to 100x slower than alone (Speculative: 26 s
// in the Release pass, 0.3 s alone; tests/bench/results/2026-12-02-suite-time-3.md).
#include <gtest/gtest.h>

#include "services/compute/omp_policy.h"

int main(int argc, char** argv) {
  k3::compute::EnsureOmpWaitPolicy();
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
