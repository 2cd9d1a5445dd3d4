#include "proc_stats.h"

#include <fstream>
#include <sstream>
#include <string>

namespace k3::launch {

ProcMemory ReadProcMemory(pid_t pid) {
  ProcMemory m;
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ss(line);
    std::string key;
    int64_t kb = 0;
    ss >> key >> kb;
    if (key == "VmHWM:") m.vm_hwm = kb * 1024;
    else if (key == "RssShmem:") m.rss_shmem = kb * 1024;
  }
  return m;
}

}  // namespace k3::launch
