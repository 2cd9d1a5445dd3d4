// Encode throughput of the k3 tokenizer on one core (not a test; run by bench_tokenizer.sh).
//   bench_tokenizer VOCAB_DIR FILE [SECONDS]
// prints "MB/s <cpu> wall_MB/s <wall> ids <n> bytes <n> seconds <s>": MB/s divides by this
// thread's CPU time, so other jobs on a shared machine do not count against it.
#include <chrono>
#include <ctime>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "common/error.h"
#include "common/run_main.h"
#include "tokenizer.h"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: bench_tokenizer VOCAB_DIR FILE [SECONDS]\n");
    return k3::kExitUsage;
  }
  return k3::RunMain("bench_tokenizer", [&] {
    const auto tok = k3::tok::Tokenizer::Load(argv[1]);
    std::ifstream f(argv[2], std::ios::binary);
    if (!f) throw k3::BadInput(std::string(argv[2]) + ": cannot open");
    std::ostringstream ss;
    ss << f.rdbuf();
    const std::string text = ss.str();
    const double limit = argc > 3 ? std::stod(argv[3]) : 5.0;
    (void)tok.Encode(text.substr(0, 1 << 16), false);  // warm up
    using Clock = std::chrono::steady_clock;
    auto cpu_now = [] {
      timespec ts;
      clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
      return ts.tv_sec + ts.tv_nsec * 1e-9;
    };
    const auto t0 = Clock::now();
    const double c0 = cpu_now();
    size_t bytes = 0, ids = 0;
    double sec = 0;
    do {
      ids += tok.Encode(text, false).size();
      bytes += text.size();
      sec = std::chrono::duration<double>(Clock::now() - t0).count();
    } while (sec < limit);
    const double cpu = cpu_now() - c0;
    std::printf("MB/s %.3f wall_MB/s %.3f ids %zu bytes %zu seconds %.3f\n", bytes / cpu / 1e6, bytes / sec / 1e6, ids,
                bytes, sec);
    return k3::kExitOk;
  });
}
