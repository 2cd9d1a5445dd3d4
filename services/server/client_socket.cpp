#include "services/server/client_socket.h"

#include <netdb.h>
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <cstdlib>

namespace k3::server {
namespace {

// The address as httplib prints it (getnameinfo, numeric), and the port.
bool Same(const sockaddr_storage& a, socklen_t len, const std::string& addr, int port) {
  int got = -1;
  if (a.ss_family == AF_INET) got = ntohs(reinterpret_cast<const sockaddr_in*>(&a)->sin_port);
  else if (a.ss_family == AF_INET6) got = ntohs(reinterpret_cast<const sockaddr_in6*>(&a)->sin6_port);
  else return false;
  char text[NI_MAXHOST] = {};
  if (got != port || getnameinfo(reinterpret_cast<const sockaddr*>(&a), len, text, sizeof text, nullptr, 0, NI_NUMERICHOST) != 0)
    return false;
  return addr == text;
}

}  // namespace

int FindConnectionSocket(const SocketAddresses& ends) {
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return -1;
  int found = -1;
  while (const dirent* e = readdir(dir)) {
    char* end = nullptr;
    const long fd = std::strtol(e->d_name, &end, 10);
    if (*end != '\0' || end == e->d_name || fd == dirfd(dir)) continue;
    struct stat st {};
    if (fstat(static_cast<int>(fd), &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
    sockaddr_storage local{}, peer{};
    socklen_t ll = sizeof local, pl = sizeof peer;
    if (getsockname(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&local), &ll) != 0 ||
        getpeername(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&peer), &pl) != 0)
      continue;
    if (Same(local, ll, ends.local_addr, ends.local_port) && Same(peer, pl, ends.remote_addr, ends.remote_port)) {
      found = static_cast<int>(fd);
      break;
    }
  }
  closedir(dir);
  return found;
}

bool PeerClosed(int fd) {
  if (fd < 0) return false;
  pollfd p{fd, POLLRDHUP, 0};
  if (poll(&p, 1, 0) <= 0) return false;
  return (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
}

}  // namespace k3::server
