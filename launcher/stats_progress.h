// What the live progress line shows for a service's latest Stats: the trunk reader's pinning
// and compute's prefill (docs/pipeline.md). Pure: stats and elapsed times in, a step out.
#pragma once
#include <map>
#include <string>

namespace k3::launch {

struct ProgressStep {
  enum Kind { kNone, kShow, kInfo, kClear } kind = kNone;  // live line, permanent line, erase
  std::string text;
  bool operator==(const ProgressStep&) const = default;
};

class StatsProgress {
 public:
  // `since_start`: seconds since the services started; `since_generate`: since the Generate
  // went out. In a chat every turn has its prefill: a live line only.
  ProgressStep Update(const std::string& service, const std::map<std::string, double>& stats, double since_start,
                      double since_generate, bool chat);

 private:
  bool pin_reported_ = false, prefill_reported_ = false;  // their final line was shown
};

}  // namespace k3::launch
