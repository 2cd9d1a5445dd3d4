// k3-server (--serve, docs/server.md): what the sixth process of a serving run holds beyond the
// process overhead every process is charged. Its threads, the bodies its connections read and
// parse, and the state of the requests it holds are bounded by its options, so the plan counts
// them from those options. The figures are measured (docs/memory-plan.md "k3-server").
#pragma once
#include <cstdint>

namespace k3::plan {

// The serve options the plan needs (max_batch is PlanOptions::max_batch, compute's too).
struct ServeInputs {
  bool serving = false;              // --serve given: k3-server runs
  int64_t http_threads = 0;          // --http-threads (0: ServeHttpThreads' default)
  int64_t queue_size = 16;           // --queue-size: requests waiting for a place in the batch
  int64_t max_body_bytes = 1 << 20;  // --max-body-bytes: the largest request body a connection reads
};

// The ranges k3-launch and k3-server accept (the plan checks them too: they bound its sums).
constexpr int64_t kMaxHttpThreads = 4096;
constexpr int64_t kMaxQueueSize = 1 << 20;
constexpr int64_t kMinBodyBytes = 1024;

// The HTTP connection threads k3-server runs: `http_threads`, or when 0 one per request that
// can run or wait (max_batch + queue_size) and 4 more, so that /health, /metrics and the
// 429s of a full queue still get a thread.
int64_t ServeHttpThreads(int64_t http_threads, int64_t max_batch, int64_t queue_size);

// Threads of k3-server besides the connection threads: the main (listening) thread, the engine
// thread, the overflow thread that answers 429, and ZeroMQ's I/O and reaper threads.
constexpr int64_t kServerOwnThreads = 5;
// Per thread: the stack pages it touches and its first malloc heap (glibc gives each thread an
// arena of its own).
constexpr int64_t kServerThreadBytes = 1ll << 20;
// Per connection thread and per byte of max_body_bytes: the body as read, its JSON tree while
// it is parsed and the prompt taken from it, at their peak (a body of small token ids).
constexpr int64_t kServerBodyFactor = 32;
// Per request held (running or waiting) and per position of its context: its prompt ids, the
// tokens compute sent with their logprobs, their text and the response built from them.
constexpr int64_t kServerPositionBytes = 4096;
// Per vocabulary id: the bytes of each id decoded once and cached for the run.
constexpr int64_t kServerDecodeCacheIdBytes = 96;

struct ServerMemory {
  int64_t threads = 0;       // every thread of k3-server
  int64_t thread_bytes = 0;  // threads × kServerThreadBytes
  int64_t connections = 0;   // connection threads: bodies up to max_body_bytes being parsed
  int64_t requests = 0;      // requests held (running + waiting): their per-position state
  int64_t held_requests = 0; // how many: min(connection threads, max_batch + queue_size)
  int64_t decode_cache = 0;  // vocab × kServerDecodeCacheIdBytes
  int64_t total() const { return thread_bytes + connections + requests + decode_cache; }
};

// All zero when !s.serving.
ServerMemory ServerBytes(const ServeInputs& s, int64_t max_batch, int64_t context, int64_t vocab);

}  // namespace k3::plan
