// k3-bench-membw [--gib N] [--repeats R] [--threads T]
// Memory read bandwidth: all threads sum a buffer far larger than the caches. This is the
// ceiling for a token whose weights are all resident (each weight byte is read once per
// token), so bench_pipeline.py divides the bytes a token touches by it. Prints GB/s (10^9):
// the median pass (what bench_pipeline.py uses), the best, the mean and every pass. On the
// shared VM of docs/benchmarks.md single passes sometimes run ~1.5x faster than the rest (best
// 48.8 against median ~33 GB/s), so the best pass overstates what a sustained sweep gets.
#include <omp.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "common/cli_parse.h"
#include "common/error.h"
#include "common/median.h"
#include "common/run_main.h"
#include "common/word_sum.h"

namespace {

int Run(int argc, char** argv) {
  CLI::App app{"k3-bench-membw: memory read bandwidth (all cores, buffer >> caches)"};
  double gib = 4;
  int repeats = 5, threads = 0;
  app.add_option("--gib", gib, "buffer size in GiB")->check(CLI::Range(0.0625, 256.0));
  app.add_option("--repeats", repeats, "timed passes (best is reported)")->check(CLI::Range(1, 1000));
  app.add_option("--threads", threads, "OpenMP threads (default: all cores)")->check(CLI::Range(0, 1024));
  if (!k3::ParseCommandLine(app, argc, argv, "k3-bench-membw")) return k3::kExitOk;
  omp_set_num_threads(threads > 0 ? threads : omp_get_num_procs());

  const size_t bytes = static_cast<size_t>(gib * 1073741824.0) / 4096 * 4096;
  const size_t n = bytes / sizeof(uint64_t);
  auto* raw = static_cast<uint64_t*>(std::aligned_alloc(4096, bytes));
  if (!raw) {
    std::fprintf(stderr, "k3-bench-membw: cannot allocate %zu bytes\n", bytes);
    return 3;
  }
  std::unique_ptr<uint64_t, decltype(&std::free)> buf(raw, &std::free);
  // First touch in parallel with the same static schedule, so pages are faulted in (and,
  // on NUMA machines, placed) the way the timed passes read them.
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; ++i) raw[i] = i * 0x9E3779B97F4A7C15ull;

  uint64_t check = k3::ParallelWordSum(raw, static_cast<int64_t>(n));  // warm-up pass
  double best = 1e30, total = 0;
  std::vector<double> gbs;
  std::string passes;
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    check ^= k3::ParallelWordSum(raw, static_cast<int64_t>(n));
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::min(best, s);
    total += s;
    gbs.push_back(bytes / s / 1e9);
    char one[32];
    std::snprintf(one, sizeof one, "%s%.1f", r ? " " : "", gbs.back());
    passes += one;
  }
  std::printf("membw: %zu bytes, %d threads, median %.1f GB/s, best %.1f GB/s, mean %.1f GB/s (passes %s; checksum %llx)\n",
              bytes, omp_get_max_threads(), k3::Median(gbs), bytes / best / 1e9, bytes * repeats / total / 1e9,
              passes.c_str(), static_cast<unsigned long long>(check));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return k3::RunMain("k3-bench-membw", [&] { return Run(argc, argv); });
}
