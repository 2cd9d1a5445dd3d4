// The socket of the connection an HTTP handler serves, found from the addresses httplib
// reports (cpp-httplib 0.11 does not hand handlers their socket), so a handler that waits
// (for the tokenizer, the queue, a non-streamed answer) can notice its client went away
// without writing anything to it.
//
// Thread-safety: any thread; the handler's connection stays open while it runs, so its fd
// cannot be reused meanwhile.
#pragma once
#include <string>

namespace k3::server {

struct SocketAddresses {
  std::string local_addr, remote_addr;
  int local_port = -1, remote_port = -1;
};

// The fd of this process's TCP socket with exactly these two ends, or -1.
int FindConnectionSocket(const SocketAddresses& ends);

// True when the peer of `fd` has closed or reset its side (a client that went away).
bool PeerClosed(int fd);

}  // namespace k3::server
