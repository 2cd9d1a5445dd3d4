// k3-bench-codec: how fast the coded trunk decodes (docs/formats.md, "Coded trunk"), in GB/s of
// bf16 output per core, scalar twin against the AVX2 body, against a memcpy of the same output
// bytes measured in the same run (median of repeats; one thread, so per core). The input is
// Gaussian bf16 at a few standard deviations (the escape rate moves with it), far larger than
// the last-level cache, coded once before timing. Each case prints the wall-clock rate and the
// rate per second of this thread's CPU time (CLOCK_THREAD_CPUTIME_ID): on a shared machine the
// second is the one that says what a core does, the first what this run got.
#include <time.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "common/cli_parse.h"
#include "common/codec/coded_run.h"
#include "common/error.h"
#include "common/median.h"
#include "common/run_main.h"
#include "tests/unit/codec/codec_test_util.h"  // the tests' Gaussian bf16, one generator for both

namespace {

using Clock = std::chrono::steady_clock;

double ThreadCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

struct Times {
  double wall = 0, cpu = 0;  // medians, seconds
};

Times TimeMedian(int reps, const std::function<void()>& fn) {
  fn();  // warm-up: pages touched, caches in their steady state
  std::vector<double> wall, cpu;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = Clock::now();
    const double c0 = ThreadCpuSeconds();
    fn();
    cpu.push_back(ThreadCpuSeconds() - c0);
    wall.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return {k3::Median(wall), k3::Median(cpu)};
}

int Run(int argc, char** argv) {
  CLI::App app{"k3-bench-codec: coded-trunk decode GB/s per core, scalar vs AVX2, against memcpy"};
  int reps = 7;
  double mib = 256;
  std::vector<double> sigmas = {0.01, 0.0177, 1.0};
  app.add_option("--reps", reps, "timed repeats per case (median reported)")->check(CLI::Range(1, 1000));
  app.add_option("--mib", mib, "MiB of bf16 output per case")->check(CLI::Range(1.0, 65536.0));
  app.add_option("--sigma", sigmas, "standard deviations of the Gaussian weights (repeatable)");
  if (!k3::ParseCommandLine(app, argc, argv, "k3-bench-codec")) return k3::kExitOk;

  const size_t values = static_cast<size_t>(mib * (1 << 20) / 2);
  std::printf("%-8s %-8s %8s %9s %9s %11s %11s %10s\n", "sigma", "body", "ratio", "wall_ms", "cpu_ms", "GB/s_wall",
              "GB/s_core", "vs_memcpy");
  for (double sigma : sigmas) {
    const std::vector<uint8_t> src = k3::codec::test::GaussianBf16(values, sigma, 42);
    const std::vector<uint8_t> coded = k3::codec::EncodeRun(src.data(), src.size(), {{0, src.size()}});
    std::vector<uint8_t> out(src.size());
    const double ratio = static_cast<double>(coded.size()) / static_cast<double>(src.size());
    const double gb = static_cast<double>(src.size()) / 1e9;
    const Times base = TimeMedian(reps, [&] { std::memcpy(out.data(), src.data(), src.size()); });
    auto row = [&](const char* body, double r, const Times& t) {
      std::printf("%-8g %-8s %8.4f %9.2f %9.2f %11.2f %11.2f %10.2f\n", sigma, body, r, t.wall * 1e3, t.cpu * 1e3,
                  gb / t.wall, gb / t.cpu, base.cpu / t.cpu);
    };
    row("memcpy", 1.0, base);
    for (k3::codec::Isa isa : {k3::codec::Isa::kScalar, k3::codec::Isa::kAvx2}) {
      if (isa == k3::codec::Isa::kAvx2 && !__builtin_cpu_supports("avx2")) continue;
      const Times t = TimeMedian(reps, [&] { k3::codec::DecodeRun(coded.data(), coded.size(), out.data(), out.size(), isa); });
      if (out != src) throw k3::RuntimeFailure("decode is not byte-exact");
      row(k3::codec::IsaName(isa), ratio, t);
    }
  }
  return k3::kExitOk;
}

}  // namespace

int main(int argc, char** argv) {
  return k3::RunMain("k3-bench-codec", [&] { return Run(argc, argv); });
}
