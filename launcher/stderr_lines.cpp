#include "launcher/stderr_lines.h"

namespace k3::launch {

std::vector<std::string> StderrLines::Take(bool flush) {
  std::vector<std::string> out;
  size_t nl;
  while ((nl = buf_.find('\n')) != std::string::npos) {
    out.push_back(buf_.substr(0, nl));
    buf_.erase(0, nl + 1);
  }
  if ((flush || buf_.size() > kMaxHeldStderr) && !buf_.empty()) {
    out.push_back(std::move(buf_));
    buf_.clear();
  }
  return out;
}

bool ShowServiceLine(const std::string& line, bool quiet) { return !quiet || (!line.empty() && line[0] != '['); }

}  // namespace k3::launch
