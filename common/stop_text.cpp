#include "common/stop_text.h"

#include <algorithm>

namespace k3 {

StopTextMatcher::StopTextMatcher(std::vector<std::string> stops) {
  for (std::string& s : stops)
    if (!s.empty()) stops_.push_back(std::move(s));
}

std::string StopTextMatcher::Feed(std::string_view text) {
  if (matched_) return {};
  std::string buf = std::move(held_);
  held_.clear();
  buf.append(text);
  // The earliest stop string wins; at the same start, the longest.
  size_t best = std::string::npos;
  for (const std::string& s : stops_) {
    const size_t at = buf.find(s);
    if (at == std::string::npos) continue;
    if (at < best || (at == best && s.size() > matched_stop_.size())) {
      best = at;
      matched_stop_ = s;
    }
  }
  if (best != std::string::npos) {
    matched_ = true;
    buf.resize(best);
    return buf;
  }
  // Hold back the longest tail of buf that begins some stop string (a proper prefix: a whole
  // one would have been found above).
  size_t hold = 0;
  for (const std::string& s : stops_) {
    const size_t most = std::min(s.size() - 1, buf.size());
    for (size_t k = most; k > hold; --k)
      if (buf.compare(buf.size() - k, k, s, 0, k) == 0) {
        hold = k;
        break;
      }
  }
  held_ = buf.substr(buf.size() - hold);
  buf.resize(buf.size() - hold);
  return buf;
}

std::string StopTextMatcher::Finish() {
  std::string rest = std::move(held_);
  held_.clear();
  return matched_ ? std::string() : rest;
}

}  // namespace k3
