#include "common/stdout_writer.h"

#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <string>

#include "common/error.h"

namespace k3 {
namespace {

// A pipe whose reader has gone reports POLLERR. Asked when stdout's error flag was set by an
// earlier write (std::cout, printf) whose errno is long gone.
bool StdoutPipeClosed() {
  pollfd p{STDOUT_FILENO, 0, 0};
  return ::poll(&p, 1, 0) == 1 && (p.revents & POLLERR);
}

}  // namespace

void IgnoreSigpipe() { std::signal(SIGPIPE, SIG_IGN); }

StdoutWrite WriteStdout(std::string_view s) {
  errno = 0;
  if (!s.empty()) std::fwrite(s.data(), 1, s.size(), stdout);
  const bool ok = std::fflush(stdout) == 0 && !std::ferror(stdout);
  if (ok) return StdoutWrite::kOk;
  const int err = errno;
  std::clearerr(stdout);
  if (err == EPIPE || StdoutPipeClosed()) return StdoutWrite::kClosed;
  errno = err != 0 ? err : EIO;
  return StdoutWrite::kFailed;
}

void WriteStdoutOrStop(std::string_view s) {
  switch (WriteStdout(s)) {
    case StdoutWrite::kOk:
      return;
    case StdoutWrite::kClosed:
      throw StdoutClosed();
    case StdoutWrite::kFailed:
      throw Error(kExitOutput, std::string("stdout: ") + std::strerror(errno));
  }
}

}  // namespace k3
