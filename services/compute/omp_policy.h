// OpenMP wait policy of k3-compute. libgomp's default lets idle threads spin for a while at
// every barrier and between parallel regions. A decode step runs hundreds of short regions
// with serial code between them; on a machine whose cores are shared (other processes, the
// pipeline's own I/O threads) the spinning thread steals the core the working thread needs:
// measured on the 2-core benchmark machine, 2.0 s/token spinning vs 0.75 s/token passive
// (docs/benchmarks.md). libgomp reads OMP_WAIT_POLICY only when it is loaded, so when the
// user has not chosen a policy the process re-executes itself once with "passive".
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
  ::execv("/proc/self/exe", argv.data());
  // execv returned: continue in this process (policy unchanged, harmless).
}

}  // namespace k3::compute
