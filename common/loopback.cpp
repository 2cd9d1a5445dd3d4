#include "common/loopback.h"

namespace k3 {

bool IsLoopbackHost(std::string host) {
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  return host == "localhost" || host == "lo" || host == "::1" || host.rfind("127.", 0) == 0;
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
