#include "services/server/connection_gate.h"

#include <dirent.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <memory>
#include <vector>

namespace k3::server {
namespace {
using Clock = std::chrono::steady_clock;
constexpr size_t kPeekBytes = 64 * 1024;  // a head larger than this goes on (httplib refuses it)

int LocalPort(int fd) {
  sockaddr_storage a{};
  socklen_t len = sizeof a;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) return -1;
  if (a.ss_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in*>(&a)->sin_port);
  if (a.ss_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6*>(&a)->sin6_port);
  return -1;
}
}  // namespace

bool RequestHeadComplete(std::string_view peeked) {
  return peeked.find("\r\n\r\n") != std::string_view::npos || peeked.find("\n\n") != std::string_view::npos;
}

ConnectionGate::ConnectionGate(GateLimits limits, std::function<void(std::function<void()>)> pass)
    : limits_(limits), pass_(std::move(pass)), epoll_(epoll_create1(EPOLL_CLOEXEC)) {
  thread_ = std::thread([this] { Loop(); });
}

ConnectionGate::~ConnectionGate() {
  Stop();
  if (epoll_ >= 0) close(epoll_);
}

// Called with mu_ held.
int ConnectionGate::NewConnectionFd(ino_t& ino) {
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return -1;
  int found = -1, count = 0;
  std::vector<std::pair<int, ino_t>> unknown;
  while (const dirent* e = readdir(dir)) {
    char* end = nullptr;
    const long fd = std::strtol(e->d_name, &end, 10);
    if (*end != '\0' || end == e->d_name || fd == dirfd(dir) || fd == epoll_) continue;
    struct stat st {};
    if (fstat(static_cast<int>(fd), &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
    const auto live = live_.find(static_cast<int>(fd));
    if ((live != live_.end() && live->second == st.st_ino) || waiting_.count(static_cast<int>(fd))) continue;
    int listening = 0;
    socklen_t len = sizeof listening;
    if (getsockopt(static_cast<int>(fd), SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) != 0 || listening) continue;
    if (LocalPort(static_cast<int>(fd)) != limits_.port) continue;
    found = static_cast<int>(fd);
    ino = st.st_ino;
    ++count;
    unknown.emplace_back(found, st.st_ino);
  }
  closedir(dir);
  if (count == 1) return found;
  // Several unknown (one went on ungated before): none is gated now, and all are known from
  // here on, so the next accept is found again.
  for (const auto& [fd, i] : unknown) live_[fd] = i;
  return -1;
}

void ConnectionGate::Admit(std::function<void()> task) {
  std::unique_lock<std::mutex> lock(mu_);
  ino_t ino = 0;
  const int fd = stop_ || epoll_ < 0 ? -1 : NewConnectionFd(ino);
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLRDHUP | EPOLLET;  // edge: a slow head wakes the gate once per arrival
  ev.data.fd = fd;
  if (fd < 0 || epoll_ctl(epoll_, EPOLL_CTL_ADD, fd, &ev) != 0) {
    if (fd >= 0) live_[fd] = ino;  // known, so it is not taken for the next accept's socket
    lock.unlock();
    pass_(std::move(task));
    return;
  }
  waiting_[fd] = Waiting{fd, ino, Clock::now(), std::move(task)};
  // Too many waiting: the oldest goes, shut down.
  if (waiting_.size() > limits_.max_waiting) {
    auto oldest = waiting_.begin();
    for (auto it = waiting_.begin(); it != waiting_.end(); ++it)
      if (it->second.accepted < oldest->second.accepted) oldest = it;
    const int old_fd = oldest->first;
    lock.unlock();
    PassOn(old_fd, true);
  }
}

// Takes `fd` out of the gate and hands its task on; `shut`: the socket is shut down first, so
// httplib's read fails at once and it closes the connection.
void ConnectionGate::PassOn(int fd, bool shut) {
  std::function<void()> task;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const auto it = waiting_.find(fd);
    if (it == waiting_.end()) return;
    epoll_ctl(epoll_, EPOLL_CTL_DEL, fd, nullptr);
    if (shut) shutdown(fd, SHUT_RDWR);
    live_[fd] = it->second.ino;
    const ino_t ino = it->second.ino;
    // When the task ends httplib has closed the fd: forget it (unless the number is reused).
    task = [this, fd, ino, inner = std::move(it->second.task)] {
      inner();
      std::lock_guard<std::mutex> l(mu_);
      const auto live = live_.find(fd);
      if (live != live_.end() && live->second == ino) live_.erase(live);
    };
    waiting_.erase(it);
  }
  pass_(std::move(task));
}

void ConnectionGate::Loop() {
  std::vector<epoll_event> events(64);
  auto buf = std::make_unique<char[]>(kPeekBytes);
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_) break;
    }
    const int n = epoll_wait(epoll_, events.data(), static_cast<int>(events.size()), 100);
    for (int i = 0; i < n; ++i) {
      const int fd = events[i].data.fd;
      const ssize_t got = recv(fd, buf.get(), kPeekBytes, MSG_PEEK | MSG_DONTWAIT);
      const bool ended = got <= 0 || (events[i].events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)) != 0;
      if (ended || static_cast<size_t>(got) == kPeekBytes ||
          RequestHeadComplete(std::string_view(buf.get(), static_cast<size_t>(got))))
        PassOn(fd, false);
    }
    std::vector<int> late;
    {
      std::lock_guard<std::mutex> lock(mu_);
      const auto now = Clock::now();
      for (const auto& [fd, w] : waiting_)
        if (now - w.accepted > limits_.header_timeout) late.push_back(fd);
    }
    for (int fd : late) PassOn(fd, true);
  }
}

void ConnectionGate::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_ && !thread_.joinable()) return;
    stop_ = true;
  }
  if (thread_.joinable()) thread_.join();
  std::vector<int> fds;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [fd, w] : waiting_) fds.push_back(fd);
  }
  for (int fd : fds) PassOn(fd, true);
}

}  // namespace k3::server
