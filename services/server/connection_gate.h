// The gate a new HTTP connection waits at before it takes a connection thread: until its whole
// request head (request line and headers) is in the socket's receive buffer, seen with
// MSG_PEEK, or until header_timeout from accept. A slow client (slowloris: a header byte every
// few seconds) so waits here, holding one fd and no thread; past the timeout, or when more
// than max_waiting wait, it is shut down (the oldest first) and httplib closes it at once.
//
// cpp-httplib 0.11 hands its task queue only a closure, not the socket: the gate finds the
// socket accept() just returned as the one connected socket on the bound port it has not seen
// (fd and inode; the listening thread enqueues right after each accept). Without one (found
// none or several), the connection goes on at once, as without the gate.
//
// Thread-safety: Admit is called by httplib's listening thread; the gate's thread does the rest.
#pragma once
#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <string_view>
#include <thread>

namespace k3::server {

// True when `peeked`, the start of a connection's bytes, holds a whole request head.
bool RequestHeadComplete(std::string_view peeked);

struct GateLimits {
  int port = 0;  // the bound port
  std::chrono::milliseconds header_timeout{std::chrono::seconds(10)};
  size_t max_waiting = 512;
};

class ConnectionGate {
 public:
  // `pass` receives each connection's task once its head is in (or it was shut down).
  ConnectionGate(GateLimits limits, std::function<void(std::function<void()>)> pass);
  ~ConnectionGate();
  void Admit(std::function<void()> task);
  void Stop();  // passes every waiting connection on, shut down

 private:
  struct Waiting {
    int fd;
    ino_t ino;
    std::chrono::steady_clock::time_point accepted;
    std::function<void()> task;
  };
  int NewConnectionFd(ino_t& ino);
  void Loop();
  void PassOn(int fd, bool shut);

  const GateLimits limits_;
  std::function<void(std::function<void()>)> pass_;
  int epoll_ = -1;
  std::mutex mu_;
  std::map<int, Waiting> waiting_;  // by fd
  std::map<int, ino_t> live_;       // connections passed on, until their task ends
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace k3::server
