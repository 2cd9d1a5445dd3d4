// Whether k3-compute's loop still turns (docs/server.md "Compute liveness"). k3-server sends a
// Ping every second while none is unanswered; compute answers with a Pong between forward passes
// (and at once when idle), and anything else it sends also proves it alive. A pass of the real
// model can take minutes, so the answer may take that long: compute counts as stalled only when
// a Ping has gone unanswered longer than `compute_timeout` and than kStepFactor times the
// longest pass seen (Step.seconds). A SIGSTOPped or wedged compute is then 503 on /health.
#pragma once
#include <chrono>
#include <optional>

namespace k3::server {

using LivenessClock = std::chrono::steady_clock;

// A pass may be slower than the longest seen (a bigger batch, colder caches): room for that.
inline constexpr double kStepFactor = 4.0;

// How long a Ping may go unanswered before compute counts as stalled.
LivenessClock::duration PongDeadline(LivenessClock::duration compute_timeout, double longest_step_seconds);

// True when a Ping went out at `unanswered_since` (nullopt: none is unanswered) and nothing
// came back from compute within PongDeadline.
bool ComputeStalled(std::optional<LivenessClock::time_point> unanswered_since, LivenessClock::time_point now,
                    LivenessClock::duration compute_timeout, double longest_step_seconds);

}  // namespace k3::server
