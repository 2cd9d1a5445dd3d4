// OpenMP wait policy of k3-compute. libgomp's default lets idle threads spin for a while at
// every barrier and between parallel regions. A decode step runs hundreds of short regions
// with serial code between them; on a machine whose cores are shared (other processes, the
// pipeline's own I/O threads) a long spin steals the core the working thread needs: measured
// on the 2-core benchmark machine, 2.0 s/token spinning vs 0.75 s/token passive
// (docs/benchmarks.md). Fully passive has its own cost: every region then starts with a futex
// wake-up, measured at 25-65 us per region there (~250 regions per token). So when the user
// has not chosen a policy: passive, plus a short spin (GOMP_SPINCOUNT=10000, about 0.2-0.4 ms
// there) that covers the gaps inside a step and still sleeps through I/O waits. libgomp reads
// these only when it is loaded, so the process re-executes itself once.
#pragma once
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace k3::compute {

inline void EnsureOmpWaitPolicy() {
  if (std::getenv("OMP_WAIT_POLICY") != nullptr) return;  // the user's choice (or done already)
  if (::setenv("OMP_WAIT_POLICY", "passive", 1) != 0) return;
  if (std::getenv("GOMP_SPINCOUNT") == nullptr && ::setenv("GOMP_SPINCOUNT", "10000", 1) != 0) return;
  // The original argv, NUL-separated; on any failure keep running with the default policy.
  std::ifstream f("/proc/self/cmdline", std::ios::binary);
  if (!f) return;
  const std::string cmdline((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::vector<char*> argv;
  std::vector<std::string> args;
  for (size_t i = 0; i < cmdline.size();) {
    const size_t j = cmdline.find('\0', i);
    const size_t end = j == std::string::npos ? cmdline.size() : j;
    args.push_back(cmdline.substr(i, end - i));
    i = end + 1;
  }
  if (args.empty()) return;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  // The binary's own path, not /proc/self/exe: the kernel names a process after the file it
  // executes, and `ps` would show "exe" instead of k3-compute.
  char self[4096];
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
  if (n > 0) {
    self[n] = '\0';
    ::execv(self, argv.data());
  }
  ::execv("/proc/self/exe", argv.data());  // the file was replaced since it started
  // execv returned: continue in this process (policy unchanged, harmless).
}

}  // namespace k3::compute
