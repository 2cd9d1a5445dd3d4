// How k3-expert-server shares its read buffers among clients and when it gives up on a
// connection that takes no replies (docs/pipeline.md "Remote expert server", "Limits"). Pure
// decisions; the server's loop (main.cpp) applies them.
//
// Why: reads used to wait in one FIFO for one pool. A client that stops reading keeps every
// buffer ZeroMQ is sending to it, so with 64 x 17.5 MB asked against a 256 MiB pool one such
// client stopped the server for everyone else.
#pragma once
#include <chrono>
#include <cstddef>
#include <cstdint>

namespace k3::svc {

// Bytes of read buffers one client (a CURVE key, or a connection without CURVE) may hold, from
// the start of a read until ZeroMQ has sent or dropped the bytes: the pool divided among the
// clients that have reads waiting or buffers out, and never more than half of it, so a client
// that has not asked yet always finds room; never less than the widest read, so every client
// can make progress.
uint64_t ClientShareBytes(uint64_t pool_bytes, uint64_t widest_read, size_t busy_clients);

// Whether a client holding `held` bytes may start a read of `bytes`: within its share, or when
// it holds nothing (its first read always may, if the pool has room).
bool MayStartRead(uint64_t held, uint64_t bytes, uint64_t share);

// Whether a connection has left its replies untaken too long: replies handed to ZeroMQ are
// still out and none of them has left the server for `timeout` (since the first one went out,
// or the last one left).
bool RepliesOverdue(int replies_out, std::chrono::steady_clock::time_point last_progress,
                    std::chrono::steady_clock::time_point now, std::chrono::steady_clock::duration timeout);

}  // namespace k3::svc
