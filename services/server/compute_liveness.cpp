#include "services/server/compute_liveness.h"

#include <algorithm>

namespace k3::server {

LivenessClock::duration PongDeadline(LivenessClock::duration compute_timeout, double longest_step_seconds) {
  const double scaled = kStepFactor * std::max(0.0, std::min(longest_step_seconds, 1e7));
  return std::max(compute_timeout, std::chrono::duration_cast<LivenessClock::duration>(std::chrono::duration<double>(scaled)));
}

bool ComputeStalled(std::optional<LivenessClock::time_point> unanswered_since, LivenessClock::time_point now,
                    LivenessClock::duration compute_timeout, double longest_step_seconds) {
  return unanswered_since && now - *unanswered_since > PongDeadline(compute_timeout, longest_step_seconds);
}

}  // namespace k3::server
