// Which addresses only this machine can reach: the rule behind "a non-loopback bind needs a key
// unless --insecure" (k3-expert-server's --bind, k3-server's --listen / k3-launch --serve).
// A host is judged by the addresses it stands for, never by its spelling:
// "127.0.0.1.attacker.example" is a name like any other and is loopback only if every address
// it resolves to is.
#pragma once
#include <string>
#include <vector>

namespace k3 {

// A numeric address (IPv4 dotted quad or IPv6, no brackets): 127.0.0.0/8, ::1 or an
// IPv4-mapped 127.0.0.0/8. False for anything that is not a numeric address.
bool IsLoopbackAddress(const std::string& numeric);
// The numeric addresses `host` stands for (itself when numeric; a name through getaddrinfo, in
// its order); empty when it does not resolve.
std::vector<std::string> ResolveHost(std::string host);
// True when `host` (brackets allowed) stands only for loopback addresses: a numeric address by
// IsLoopbackAddress, a name when it resolves and every address is loopback ("localhost"
// normally). "lo" (ZeroMQ's interface name) counts as loopback.
bool IsLoopbackHost(std::string host);
// ZeroMQ endpoints: ipc://, inproc://, tcp:// on a loopback host.
bool LocalOnlyEndpoint(const std::string& ep);

}  // namespace k3
