#include "services/server/request_deadlines.h"

namespace k3::server {

Overdue RequestOverdue(const RequestLimits& limits, bool dispatched, DeadlineClock::time_point arrived,
                       DeadlineClock::time_point dispatched_at, DeadlineClock::time_point now) {
  if (!dispatched)
    return limits.queue_timeout.count() > 0 && now - arrived > limits.queue_timeout ? Overdue::kQueue : Overdue::kNo;
  return limits.run_timeout.count() > 0 && now - dispatched_at > limits.run_timeout ? Overdue::kRun : Overdue::kNo;
}

}  // namespace k3::server
