// Peak memory of a process from /proc/PID/status (VmHWM: peak resident set, which counts
// the shared-memory pages the process touched; RssShmem says how much of it is shm).
#pragma once
#include <sys/types.h>

#include <cstdint>

namespace k3::launch {

struct ProcMemory {
  int64_t vm_hwm = -1;      // bytes; -1 when unreadable
  int64_t rss_shmem = -1;   // bytes
};

ProcMemory ReadProcMemory(pid_t pid);

}  // namespace k3::launch
