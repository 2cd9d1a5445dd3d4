// Peak memory per process over a run, sampled from /proc (proc_stats.h): each service's
// largest VmHWM and RssShmem seen, and the launcher's own at the last sample.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "launcher/proc_stats.h"
#include "launcher/supervisor.h"

namespace k3::launch {

// `peak` raised to `now`, field by field (-1: unreadable, so never wins).
void RaisePeak(ProcMemory& peak, const ProcMemory& now);

class MemoryPeaks {
 public:
  void Sample(const std::vector<Service>& services);  // the running ones, and the launcher
  const std::map<std::string, ProcMemory>& peaks() const { return peak_; }

 private:
  std::map<std::string, ProcMemory> peak_;
};

}  // namespace k3::launch
