// The deadlines of a request's phases after its prompt is encoded (docs/server.md "Limits"):
// waiting in the queue for a place in the batch (`queue_timeout`: then 503 with Retry-After)
// and running in compute (`run_timeout`: then compute gets a Cancel and the request ends with
// what it generated, finish_reason "length"). A zero limit is none.
#pragma once
#include <chrono>

namespace k3::server {

using DeadlineClock = std::chrono::steady_clock;

struct RequestLimits {
  DeadlineClock::duration queue_timeout{0};  // from the request's arrival to its Generate sent
  DeadlineClock::duration run_timeout{0};    // from its Generate sent to its end
};

enum class Overdue { kNo, kQueue, kRun };

// Which deadline a request has passed: queued (not yet sent to compute) since `arrived`, or
// running since `dispatched_at`.
Overdue RequestOverdue(const RequestLimits& limits, bool dispatched, DeadlineClock::time_point arrived,
                       DeadlineClock::time_point dispatched_at, DeadlineClock::time_point now);

}  // namespace k3::server
