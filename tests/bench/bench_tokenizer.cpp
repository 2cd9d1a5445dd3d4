// Encode throughput of the k3 tokenizer on one core (not a test; run by bench_tokenizer.py).
//   bench_tokenizer VOCAB_DIR FILE [SECONDS] [REPEATS]
// Encodes FILE over and over for SECONDS per repeat, REPEATS times (default 5), and prints
//   "MB/s <median cpu> wall_MB/s <median wall> ids <per pass> bytes <per pass> repeats <n> all <cpu MB/s,...>"
// MB/s divides by this thread's CPU time, so other jobs on a shared machine count less; the
// median of the repeats drops the ones that a burst of other work disturbed anyway.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/median.h"
#include "common/run_main.h"
#include "tokenizer.h"

namespace {

double CpuNow() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: bench_tokenizer VOCAB_DIR FILE [SECONDS] [REPEATS]\n");
    return k3::kExitUsage;
  }
  return k3::RunMain("bench_tokenizer", [&] {
    const auto tok = k3::tok::Tokenizer::Load(argv[1]);
    std::ifstream f(argv[2], std::ios::binary);
    if (!f) throw k3::BadInput(std::string(argv[2]) + ": cannot open");
    std::ostringstream ss;
    ss << f.rdbuf();
    const std::string text = ss.str();
    const double limit = argc > 3 ? std::stod(argv[3]) : 2.0;
    const int repeats = argc > 4 ? std::max(1, std::stoi(argv[4])) : 5;
    (void)tok.Encode(text.substr(0, 1 << 16), false);  // warm up
    using Clock = std::chrono::steady_clock;
    std::vector<double> cpu_rates, wall_rates;
    size_t ids = 0;
    for (int r = 0; r < repeats; ++r) {
      const auto t0 = Clock::now();
      const double c0 = CpuNow();
      size_t bytes = 0;
      double sec = 0;
      do {
        ids = tok.Encode(text, false).size();
        bytes += text.size();
        sec = std::chrono::duration<double>(Clock::now() - t0).count();
      } while (sec < limit);
      const double cpu = CpuNow() - c0;
      cpu_rates.push_back(static_cast<double>(bytes) / cpu / 1e6);
      wall_rates.push_back(static_cast<double>(bytes) / sec / 1e6);
    }
    std::string all;
    for (double v : cpu_rates) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%s%.2f", all.empty() ? "" : ",", v);
      all += buf;
    }
    std::printf("MB/s %.3f wall_MB/s %.3f ids %zu bytes %zu repeats %d all %s\n", k3::Median(cpu_rates),
                k3::Median(wall_rates), ids, text.size(), repeats, all.c_str());
    return k3::kExitOk;
  });
}
