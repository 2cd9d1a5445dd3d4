// The services' stderr as whole lines: the launcher relays every service's stderr a line at a
// time, so their lines never split one another, the live progress line, or its last line.
// Pure (bytes in, lines out); run_loop.cpp reads the pipes.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

namespace k3::launch {

// A partial line longer than this goes out as it is (a service writing without newlines).
constexpr size_t kMaxHeldStderr = 65536;

class StderrLines {
 public:
  void Append(const char* data, size_t n) { buf_.append(data, n); }
  // Every complete line (without its '\n'); with `flush` (the service exited) or when the
  // partial line grew past kMaxHeldStderr, that partial line too.
  std::vector<std::string> Take(bool flush);

 private:
  std::string buf_;
};

// Whether a service's line is shown: everything, or in quiet mode (and during --chat) only its
// error lines ("k3-...: ..."), not its "[service] ..." progress and stats lines.
bool ShowServiceLine(const std::string& line, bool quiet);

}  // namespace k3::launch
