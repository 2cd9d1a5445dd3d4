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
  // went out (the prefill's clock when compute sends none of its own). Compute's prefill Stats
  // name the request (prefill_request) and carry its own clock (prefill_seconds), so every
  // request's prefill, one prompt's or each of a server's (alone or in a batch), ends with its
  // permanent line at its own rate. In a chat every turn has its prefill: a live line only.
  ProgressStep Update(const std::string& service, const std::map<std::string, double>& stats, double since_start,
                      double since_generate, bool chat);

 private:
  bool pin_reported_ = false;  // its final line was shown
  double last_final_ = -2;     // the request whose final prefill line was shown (-1: Stats without one)
};

}  // namespace k3::launch
