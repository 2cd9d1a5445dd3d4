// Limits and flag parsers that k3-launch and the services it starts must agree on: one home,
// so a value k3-launch accepts is never refused by the service it passes it to.
#pragma once
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/id_list.h"

namespace k3::limits {

// --max-batch: the most sequences one forward pass decodes together (the plan reserves state
// for each; k3-compute and k3-server take the same bound).
inline constexpr int64_t kMaxBatch = 64;

// --threads: the most compute threads, 4 x the online CPUs. More than a few per core only slow
// compute down, and huge counts crash the OpenMP runtime (SIGSEGV in libgomp at 100000).
inline int OnlineCpus() { return static_cast<int>(std::clamp<long>(::sysconf(_SC_NPROCESSORS_ONLN), 1, 1 << 20)); }
inline int MaxThreads() { return 4 * OnlineCpus(); }

// The --threads check: "" when `threads` is 1 .. MaxThreads() (or 0 when `zero_is_all_cores`),
// else the one-line reason.
inline std::string ThreadsProblem(int64_t threads, bool zero_is_all_cores) {
  if ((threads >= 1 && threads <= MaxThreads()) || (zero_is_all_cores && threads == 0)) return "";
  return "--threads " + std::to_string(threads) + ": must be 1 to " + std::to_string(MaxThreads()) + " (4 x the " +
         std::to_string(OnlineCpus()) + " online CPU cores)" + (zero_is_all_cores ? ", or 0 for all cores" : "");
}

// --stop-ids L,L,... and the repeatable --stop-id N: the ids in that order (the list's first,
// then each --stop-id), each below 2^31. A --stop-id with a list is a usage error.
inline std::vector<int32_t> ParseStopIds(const std::string& list, const std::vector<std::string>& singles) {
  std::vector<int32_t> out;
  for (int64_t id : ParseIdList(list, "--stop-ids", int64_t{INT32_MAX} + 1)) out.push_back(static_cast<int32_t>(id));
  for (const std::string& one : singles) {
    const std::vector<int64_t> v = ParseIdList(one, "--stop-id", int64_t{INT32_MAX} + 1);
    if (v.size() != 1) throw UsageError("--stop-id takes one id ('" + one + "'); use --stop-ids for a list");
    out.push_back(static_cast<int32_t>(v[0]));
  }
  return out;
}

}  // namespace k3::limits
