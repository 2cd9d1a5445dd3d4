// Which addresses only this machine can reach: the rule behind "a non-loopback bind needs a key
// unless --insecure" (k3-expert-server's --bind, k3-server's --listen / k3-launch --serve).
#pragma once
#include <string>

namespace k3 {

// "localhost", "lo", "::1" (bracketed or not) and 127.0.0.0/8.
bool IsLoopbackHost(std::string host);
// ZeroMQ endpoints: ipc://, inproc://, tcp:// on a loopback host.
bool LocalOnlyEndpoint(const std::string& ep);

}  // namespace k3
