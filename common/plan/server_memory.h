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
// The figures below are measured (tests/bench/bench_server_peak.py; numbers and machine in
// tests/bench/results/2026-12-01-server-peak.md): k3-server's VmHWM over its idle peak.
// Idle it peaked at 11.5 MiB (1.5 MiB anon, 10.0 MiB file) with 26 threads, within the
// kProcessOverheadBytes every process is charged.
// Per thread: the stack pages and first malloc heap it touches while serving (idle, all 26
// threads together touched 1.5 MiB of anon memory; what a request adds is in the figures below).
constexpr int64_t kServerThreadBytes = 256ll << 10;
// Per connection thread and per byte of max_body_bytes: the body as read, its JSON tree while
// it is parsed and the prompt taken from it, at their peak. With the parse bounded (64 deep, 8
// bytes per body byte) one 1 MiB body peaked at 9.6x (one string), 8.7x (chat messages), 1.9x
// (nested arrays: refused at depth 65), 10.5x (60-deep blocks), 14.4x (empty arrays), 12.7x
// (empty objects) and 24.8-29.4x (small token ids, the largest; medians of 3,
// tests/bench/results/2026-12-02-server-body-factor.md); 36 is 1.22x the largest.
constexpr int64_t kServerBodyFactor = 36;
// Per request held (running or waiting) and per position of its context: its prompt ids, the
// tokens compute sent with their logprobs, their text and the response built from them.
// Measured 4320 bytes with logprobs 20 (every request filling its context, half streamed) and
// 140 without logprobs; 6144 is 1.42x the larger.
constexpr int64_t kServerPositionBytes = 6144;
// Per vocabulary id: the bytes of each id decoded once and cached for the run (an
// unordered_map<int32_t, std::string>): 87.8 bytes per entry measured at 163,840 ids of 1-26
// bytes (heap in use, glibc); 96 is 1.09x that.
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
