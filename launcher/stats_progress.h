// What the live progress line shows for a service's latest Stats: the trunk reader's pinning
// and compute's prefill (docs/pipeline.md). Pure: stats and elapsed times in, a step out.
#pragma once
#include <cstdint>
#include <map>
#include <set>
#include <string>

namespace k3::launch {

struct ProgressStep {
  enum Kind { kNone, kShow, kInfo, kClear } kind = kNone;  // live line, permanent line, erase
  std::string text;
  bool operator==(const ProgressStep&) const = default;
};

// How a prefill ends on stderr: one prompt ends with a permanent line; each chat turn's live
// line is erased; a server's request ends with a permanent line when its prefill was long (a
// live line was shown for it, or it took kLongPrefillSeconds), so short requests leave none.
enum class ProgressMode { kOneShot, kChat, kServe };
inline constexpr double kLongPrefillSeconds = 1.0;

class StatsProgress {
 public:
  // `since_start`: seconds since the services started; `since_generate`: since the Generate
  // went out (the prefill's rate when compute does not send its own prefill_seconds).
  // Compute's prefill Stats carry the request (prefill_request) and that request's own clock
  // (prefill_seconds), so every request, alone or prefilled in a batch, gets its own rate.
  ProgressStep Update(const std::string& service, const std::map<std::string, double>& stats, double since_start,
                      double since_generate, ProgressMode mode);

 private:
  bool pin_reported_ = false;     // its final line was shown
  double last_final_ = -2;        // the request whose final prefill Stats were answered (-1: none named)
  std::set<double> live_;         // serve: requests a live prefill line was shown for (bounded)
};

}  // namespace k3::launch
