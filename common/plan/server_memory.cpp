#include "common/plan/server_memory.h"

#include <algorithm>

namespace k3::plan {

int64_t ServeHttpThreads(int64_t http_threads, int64_t max_batch, int64_t queue_size) {
  return http_threads > 0 ? http_threads : max_batch + queue_size + 4;
}

ServerMemory ServerBytes(const ServeInputs& s, int64_t max_batch, int64_t context, int64_t vocab) {
  ServerMemory r;
  if (!s.serving) return r;
  const int64_t http = ServeHttpThreads(s.http_threads, max_batch, s.queue_size);
  r.threads = http + kServerOwnThreads;
  r.thread_bytes = r.threads * kServerThreadBytes;
  // Every connection thread may be reading a body at once; the overflow thread answers before
  // any body is read.
  r.connections = http * kServerBodyFactor * s.max_body_bytes;
  // A request is held by the connection thread that submitted it until its answer is written,
  // so no more are held than there are connection threads.
  r.held_requests = std::min(http, max_batch + s.queue_size);
  r.requests = r.held_requests * context * kServerPositionBytes;
  r.decode_cache = vocab * kServerDecodeCacheIdBytes;
  return r;
}

}  // namespace k3::plan
