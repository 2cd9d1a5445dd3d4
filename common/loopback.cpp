#include "common/loopback.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

namespace k3 {
namespace {

std::string Unbracketed(std::string host) {
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  return host;
}

}  // namespace

bool IsLoopbackAddress(const std::string& numeric) {
  in_addr a4{};
  if (::inet_pton(AF_INET, numeric.c_str(), &a4) == 1) return (ntohl(a4.s_addr) >> 24) == 127;
  in6_addr a6{};
  if (::inet_pton(AF_INET6, numeric.c_str(), &a6) != 1) return false;
  if (IN6_IS_ADDR_LOOPBACK(&a6)) return true;
  return IN6_IS_ADDR_V4MAPPED(&a6) && a6.s6_addr[12] == 127;
}

std::vector<std::string> ResolveHost(std::string host) {
  host = Unbracketed(host);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  std::vector<std::string> out;
  if (host.empty() || ::getaddrinfo(host.c_str(), nullptr, &hints, &res) != 0) return out;
  for (const addrinfo* a = res; a; a = a->ai_next) {
    char text[INET6_ADDRSTRLEN] = {};
    const void* where = a->ai_family == AF_INET ? static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(a->ai_addr)->sin_addr)
                                                : static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(a->ai_addr)->sin6_addr);
    if ((a->ai_family == AF_INET || a->ai_family == AF_INET6) && ::inet_ntop(a->ai_family, where, text, sizeof text))
      out.emplace_back(text);
  }
  ::freeaddrinfo(res);
  return out;
}

bool IsLoopbackHost(std::string host) {
  host = Unbracketed(host);
  if (host == "lo") return true;
  const std::vector<std::string> addrs = ResolveHost(host);
  if (addrs.empty()) return false;
  for (const std::string& a : addrs)
    if (!IsLoopbackAddress(a)) return false;
  return true;
}

bool LocalOnlyEndpoint(const std::string& ep) {
  const size_t colon = ep.find("://");
  if (colon == std::string::npos) return false;
  const std::string scheme = ep.substr(0, colon);
  if (scheme == "ipc" || scheme == "inproc") return true;
  if (scheme != "tcp") return false;
  std::string host = ep.substr(colon + 3);
  const size_t port = host.rfind(':');
  if (port == std::string::npos) return false;
  host.resize(port);
  return IsLoopbackHost(host);
}

}  // namespace k3
