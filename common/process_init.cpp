#include "common/process_init.h"

#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <iostream>
#include <streambuf>
#include <string>

namespace k3 {
namespace {

void WriteAll(const char* p, size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(STDERR_FILENO, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return;  // stderr gone: nothing better to do with a diagnostic
    p += w;
    n -= static_cast<size_t>(w);
  }
}

// One pending partial line per thread, so threads of one process do not interleave either;
// what is left when a thread (or the process) ends is written then. Streams flushed later in
// exit (std::ios_base::Init) find t_gone set and write straight through.
thread_local bool t_gone = false;  // trivially destructible: still readable during exit
struct PendingLine {
  std::string text;
  ~PendingLine() {
    if (!text.empty()) WriteAll(text.data(), text.size());
    t_gone = true;
  }
};
thread_local PendingLine t_pending;
std::string* Pending() { return t_gone ? nullptr : &t_pending.text; }

constexpr size_t kMaxPending = 1 << 16;  // a longer "line" goes out in pieces

// No put area: every character goes through xsputn/overflow, which work on the calling
// thread's line only, so no lock is needed.
class LineStderrBuf : public std::streambuf {
 protected:
  std::streamsize xsputn(const char* s, std::streamsize n) override {
    std::string* pending = Pending();
    if (!pending) {
      WriteAll(s, static_cast<size_t>(n));
      return n;
    }
    std::string& line = *pending;
    line.append(s, static_cast<size_t>(n));
    const size_t last = line.rfind('\n');
    if (last != std::string::npos) {
      WriteAll(line.data(), last + 1);
      line.erase(0, last + 1);
    } else if (line.size() >= kMaxPending) {
      WriteAll(line.data(), line.size());
      line.clear();
    }
    return n;
  }
  int_type overflow(int_type c) override {
    if (traits_type::eq_int_type(c, traits_type::eof())) return traits_type::not_eof(c);
    const char ch = traits_type::to_char_type(c);
    xsputn(&ch, 1);
    return c;
  }
  int sync() override {  // an explicit flush: the caller wants the partial line out now
    if (std::string* line = Pending()) {
      WriteAll(line->data(), line->size());
      line->clear();
    }
    return 0;
  }
};

extern "C" void IgnoreSignal(int) {}
}  // namespace

void WriteStderr(const char* text, size_t n) { WriteAll(text, n); }

namespace {

extern "C" void ExitInterrupted(int) { _exit(5); }  // kExitInterrupted; _exit is async-signal-safe

}  // namespace

void InitProcess() {
  static char stdio_buf[1 << 16];
  std::setvbuf(stderr, stdio_buf, _IOLBF, sizeof stdio_buf);
  static LineStderrBuf* buf = new LineStderrBuf;  // never destroyed: streams flush it during exit
  std::cerr.rdbuf(buf);
  std::clog.rdbuf(buf);
  // cerr flushes after every << by default (unitbuf); with a flush meaning "write the partial
  // line now" that would split lines again. Whole lines go out by themselves.
  std::cerr.unsetf(std::ios::unitbuf);

  struct sigaction sa {};
  sa.sa_handler = IgnoreSignal;
  sigemptyset(&sa.sa_mask);
  // SA_RESTART: read/write/waitpid resume by themselves (stdio would drop output on EINTR);
  // poll and sleeps still return EINTR, and k3 retries those itself.
  sa.sa_flags = SA_RESTART;
  sigaction(SIGUSR1, &sa, nullptr);
  sigaction(SIGUSR2, &sa, nullptr);
}

void ExitOnStopSignals() {
  struct sigaction sa {};
  sa.sa_handler = ExitInterrupted;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaction(sig, &sa, nullptr);
}

}  // namespace k3
