// One round of the launcher's loop: poll the sockets (and the signal pipe), take every
// message, reap the services that ended, relay their stderr; and stdout.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/error.h"
#include "common/stdout_writer.h"
#include "launcher/runner.h"

namespace k3::launch {

// The services' stderr, line by line (a partial line waits for its end, or for the service's
// exit: `flush`). Quiet mode and a chat pass on only their error lines (ShowServiceLine).
void Runner::ForwardChildStderr(bool flush, int only) {
  for (size_t i = 0; i < sup_.services().size(); ++i) {
    Service& s = sup_.services()[i];
    if (s.stderr_fd < 0 || (only >= 0 && static_cast<size_t>(only) != i)) continue;
    StderrLines& lines = stderr_[s.name];
    char chunk[4096];
    for (;;) {
      const ssize_t n = ::read(s.stderr_fd, chunk, sizeof chunk);
      if (n > 0) lines.Append(chunk, static_cast<size_t>(n));
      else if (n < 0 && errno == EINTR) continue;
      else break;
    }
    for (const std::string& line : lines.Take(flush))
      if (ShowServiceLine(line, opt_.quiet || chat_active_)) progress_.Always(line);
  }
}

void Runner::DrainSockets() {
  const auto now = Clock::now();
  while (auto r = ipc::ReceiveVerified(*control_, true, ipc::DecodeControl, now, rejects_)) HandleControl(*r);
  while (auto r = ipc::ReceiveVerified(*compute_, true, ipc::DecodeCompute, now, rejects_)) HandleCompute(*r);
  if (tok_) {
    tok_->Drain(rejects_);
    PrintText();
  }
}

// `extra`: more items to poll (the chat's terminal and tokenizer socket); revents set.
bool Runner::PumpWith(std::span<zmq::pollitem_t> extra, Clock::time_point deadline) {
  std::vector<zmq::pollitem_t> items = {{control_->handle(), 0, ZMQ_POLLIN, 0},
                                        {compute_->handle(), 0, ZMQ_POLLIN, 0},
                                        {nullptr, sup_.wake_fd(), ZMQ_POLLIN, 0},
                                        {tok_ ? tok_->socket().handle() : nullptr, -1, ZMQ_POLLIN, 0}};
  const size_t base = tok_ ? 4 : 3;
  items.resize(base);
  items.insert(items.end(), extra.begin(), extra.end());
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  const long ms = std::clamp<long>(static_cast<long>(left.count()), 0, 200);
  ipc::Poll(items.data(), items.size(), std::chrono::milliseconds(ms));  // a signal is a wake-up
  for (size_t i = 0; i < extra.size(); ++i) extra[i].revents = items[base + i].revents;
  if (items[2].revents & ZMQ_POLLIN) sup_.DrainWake();
  // Messages first: a Dead sent just before exiting is the reason for the exit seen next.
  DrainSockets();
  HandleDeaths();
  ForwardChildStderr(false);
  return Clock::now() < deadline;
}

void Runner::Out(const std::string& s) {
  if (stdout_closed_ || s.empty()) return;
  progress_.BeforeStdout();
  const StdoutWrite w = WriteStdout(s);
  if (w != StdoutWrite::kOk) {
    stdout_closed_ = true;  // closed: the reader is gone (| head), stop like Ctrl-C, quietly
    if (w == StdoutWrite::kFailed) Fail({kExitOutput, "stdout", std::string("stdout: ") + std::strerror(errno)});
  }
  progress_.AfterStdout(s.back() == '\n');
}

}  // namespace k3::launch
