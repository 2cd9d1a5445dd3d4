#include "launcher/memory_peaks.h"

#include <unistd.h>

#include <algorithm>

namespace k3::launch {

void RaisePeak(ProcMemory& peak, const ProcMemory& now) {
  peak.vm_hwm = std::max(peak.vm_hwm, now.vm_hwm);
  peak.rss_shmem = std::max(peak.rss_shmem, now.rss_shmem);
}

void MemoryPeaks::Sample(const std::vector<Service>& services) {
  for (const Service& s : services)
    if (s.pid > 0) RaisePeak(peak_[s.name], ReadProcMemory(s.pid));
  peak_["launcher"] = ReadProcMemory(::getpid());
}

}  // namespace k3::launch
