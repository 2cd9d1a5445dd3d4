// k3-bench-kernels: how close the matvec kernels come to streaming weights at memory speed.
// For bf16 and MXFP4 products at real K3 sizes it prints GB/s of weight bytes read per call
// (T = 1 and T = 8; scalar and AVX2; 1 and 2 threads; median of repeats) and the ratio to a
// read-bandwidth baseline measured in the same run by summing a 1 GiB buffer.
//
// MXFP4 matrices are small (one expert's w1 is ~5.8 MB), so each timed call sweeps several
// distinct copies, like a decode step touching many experts; nothing is served from cache.
#include <omp.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "common/cli_parse.h"
#include "common/error.h"
#include "common/median.h"
#include "common/run_main.h"
#include "common/word_sum.h"
#include "services/compute/kernels/matmul.h"

namespace {

using Clock = std::chrono::steady_clock;

// Median seconds of `reps` runs of fn after one warm-up run.
double TimeMedian(int reps, const std::function<void()>& fn) {
  fn();
  std::vector<double> s;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = Clock::now();
    fn();
    s.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return k3::Median(s);
}

// Read bandwidth: sum a buffer far larger than any cache with `threads` threads.
double BaselineGBs(const std::vector<uint64_t>& buf, int threads, int reps) {
  omp_set_num_threads(threads);
  volatile uint64_t sink = 0;
  const int64_t n = static_cast<int64_t>(buf.size());
  const uint64_t* p = buf.data();
  const double sec = TimeMedian(reps, [&] {
    sink = sink + k3::ParallelWordSum(p, n);
  });
  return static_cast<double>(n) * 8.0 / sec / 1e9;
}

struct Row {
  std::string kernel;
  int64_t T;
  std::string isa;
  int threads;
  double ms, gbs, ratio;
};

void Print(const Row& r) {
  std::printf("%-28s T=%-2lld %-6s threads=%d  %9.2f ms  %7.2f GB/s  %5.2f of baseline\n",
              r.kernel.c_str(), static_cast<long long>(r.T), r.isa.c_str(), r.threads, r.ms, r.gbs,
              r.ratio);
  std::fflush(stdout);
}

int Run(int argc, char** argv) {
  CLI::App app{"k3 kernel throughput: weight GB/s vs a memory-read baseline"};
  int reps = 5;
  int mx_copies = 32;
  double baseline_gib = 1.0;
  bool skip_scalar = false;
  app.add_option("--reps", reps, "timed repeats per case (median reported)")->check(CLI::Range(1, 1000));
  app.add_option("--mx-copies", mx_copies, "distinct 3072x3584 MXFP4 matrices swept per call")
      ->check(CLI::Range(1, 4096));
  app.add_option("--baseline-gib", baseline_gib, "size of the summed baseline buffer")
      ->check(CLI::Range(0.0625, 64.0));
  app.add_flag("--skip-scalar", skip_scalar, "time only the AVX2 bodies");
  if (!k3::ParseCommandLine(app, argc, argv, "k3-bench-kernels")) return k3::kExitOk;

  std::printf("k3-bench-kernels: cpu avx2+fma=%s, dispatch=%s, max threads=%d\n",
              k3::kern::CpuHasAvx2Fma() ? "yes" : "no", k3::kern::ActiveIsa(), omp_get_max_threads());
  // Other processes competing for the cores make every number below meaningless; say so.
  double load = 0.0;
  if (std::FILE* f = std::fopen("/proc/loadavg", "r")) {
    if (std::fscanf(f, "%lf", &load) != 1) load = 0.0;
    std::fclose(f);
  }
  if (load > 0.5 * omp_get_num_procs()) {
    std::printf("warning: 1-minute load average %.1f on %d cpus; timings are not representative\n",
                load, omp_get_num_procs());
  }

  std::vector<uint64_t> buf(static_cast<size_t>(baseline_gib * (1 << 30)) / 8);
  for (size_t i = 0; i < buf.size(); ++i) buf[i] = i * 0x9E3779B97F4A7C15ull;  // fault in
  double base[3] = {0, 0, 0};
  for (int th : {1, 2}) {
    base[th] = BaselineGBs(buf, th, reps);
    const std::string label = "baseline sum " + std::to_string(baseline_gib).substr(0, 6) + " GiB";
    std::printf("%-28s       %-6s threads=%d               %7.2f GB/s\n", label.c_str(), "", th, base[th]);
  }
  buf.clear();
  buf.shrink_to_fit();

  std::mt19937 rng(1);
  // bf16 7168 x 12288 (176 MB): larger than any cache on its own.
  const int64_t br = 7168, bc = 12288;
  std::vector<uint16_t> wb(static_cast<size_t>(br * bc));
  for (auto& v : wb) v = k3::kern::F32ToBf16(std::uniform_real_distribution<float>(-1, 1)(rng));
  const k3::kern::DenseMat dense{wb.data(), k3::kern::WFormat::BF16, br, bc};

  // MXFP4 3072 x 3584, realistic scale bytes 120..122, several distinct copies.
  const int64_t mr = 3072, mc = 3584;
  const size_t packed_bytes = static_cast<size_t>(mr * mc / 2), scale_bytes = static_cast<size_t>(mr * mc / 32);
  std::vector<uint8_t> mp(packed_bytes * mx_copies), ms(scale_bytes * mx_copies);
  for (auto& b : mp) b = static_cast<uint8_t>(rng());
  for (auto& b : ms) b = static_cast<uint8_t>(120 + rng() % 3);

  const int64_t max_t = 8;
  std::vector<float> X(static_cast<size_t>(max_t * std::max(bc, mc)));
  for (auto& v : X) v = std::uniform_real_distribution<float>(-1, 1)(rng);
  std::vector<float> Y(static_cast<size_t>(max_t * std::max(br, mr)));

  using DenseFn = void (*)(const k3::kern::DenseMat&, const float*, int64_t, float*);
  using MxFn = void (*)(const k3::kern::Mxfp4Mat&, const float*, int64_t, float*);
  struct Isa {
    const char* name;
    DenseFn dense;
    MxFn mx;
  };
  std::vector<Isa> isas;
  if (!skip_scalar) isas.push_back({"scalar", k3::kern::MatmulScalar, k3::kern::MatmulMxfp4Scalar});
  if (k3::kern::CpuHasAvx2Fma()) isas.push_back({"avx2", k3::kern::MatmulAvx2, k3::kern::MatmulMxfp4Avx2});
  // The AVX-512 bodies (the defaults where the CPU has them).
  if (k3::kern::CpuHasAvx512()) isas.push_back({"avx512", k3::kern::MatmulAvx512, k3::kern::MatmulMxfp4Avx512});
  // The bf16-input MXFP4 body (routed experts with expert_inputs = "bf16"); no dense twin.
  if (k3::kern::CpuHasAvx512Bf16()) isas.push_back({"bf16in", nullptr, k3::kern::MatmulMxfp4Bf16InAvx512});

  const std::string mx_name = "mxfp4 3072x3584 x" + std::to_string(mx_copies);
  for (int64_t T : {int64_t{1}, max_t}) {
    for (const Isa& isa : isas) {
      for (int th : {1, 2}) {
        omp_set_num_threads(th);
        if (isa.dense != nullptr) {
          const double bytes_b = static_cast<double>(wb.size()) * 2.0;
          const double sb = TimeMedian(reps, [&] { isa.dense(dense, X.data(), T, Y.data()); });
          Print({"bf16 7168x12288", T, isa.name, th, sb * 1e3, bytes_b / sb / 1e9, bytes_b / sb / 1e9 / base[th]});
        }

        const double bytes_m = static_cast<double>(mp.size() + ms.size());
        const double sm = TimeMedian(reps, [&] {
          for (int i = 0; i < mx_copies; ++i) {
            const k3::kern::Mxfp4Mat m{mp.data() + i * packed_bytes, ms.data() + i * scale_bytes, mr, mc, 32};
            isa.mx(m, X.data(), T, Y.data());
          }
        });
        Print({mx_name, T, isa.name, th, sm * 1e3, bytes_m / sm / 1e9, bytes_m / sm / 1e9 / base[th]});
      }
    }
  }
  return k3::kExitOk;
}

}  // namespace

int main(int argc, char** argv) {
  return k3::RunMain("k3-bench-kernels", [&] { return Run(argc, argv); });
}
