// Compute's liveness rule (services/server/compute_liveness.h) and the queue and run deadlines
// (services/server/request_deadlines.h), against the rules as docs/server.md states them.
#include <gtest/gtest.h>

#include "services/server/compute_liveness.h"
#include "services/server/request_deadlines.h"

namespace k3::server {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
const LivenessClock::time_point t0 = LivenessClock::time_point() + std::chrono::hours(1);

TEST(ComputeLiveness, NothingUnansweredIsAlive) {
  EXPECT_FALSE(ComputeStalled(std::nullopt, t0 + std::chrono::hours(5), seconds(2), 0));
}

TEST(ComputeLiveness, APingUnansweredPastTheTimeoutIsStalled) {
  EXPECT_FALSE(ComputeStalled(t0, t0 + milliseconds(1999), seconds(2), 0));
  EXPECT_FALSE(ComputeStalled(t0, t0 + seconds(2), seconds(2), 0));
  EXPECT_TRUE(ComputeStalled(t0, t0 + milliseconds(2001), seconds(2), 0));
}

TEST(ComputeLiveness, ABusyComputeGetsFourTimesItsLongestPass) {
  // The real model: passes of 90 s seen; a Ping sent as a pass began is answered after it.
  EXPECT_FALSE(ComputeStalled(t0, t0 + seconds(100), seconds(60), 90));
  EXPECT_FALSE(ComputeStalled(t0, t0 + seconds(360), seconds(60), 90));
  EXPECT_TRUE(ComputeStalled(t0, t0 + seconds(361), seconds(60), 90));
  // Short passes never make the deadline shorter than compute_timeout.
  EXPECT_EQ(PongDeadline(seconds(60), 0.001), seconds(60));
  EXPECT_EQ(PongDeadline(seconds(1), 2.5), seconds(10));
  // A nonsense pass time (negative, huge) does not break it.
  EXPECT_EQ(PongDeadline(seconds(3), -5), seconds(3));
  EXPECT_GT(PongDeadline(seconds(3), 1e300), std::chrono::hours(24));
}

TEST(RequestDeadlines, QueueWaitCountsFromArrivalUntilDispatched) {
  const RequestLimits l{seconds(10), seconds(100)};
  EXPECT_EQ(RequestOverdue(l, false, t0, {}, t0 + seconds(10)), Overdue::kNo);
  EXPECT_EQ(RequestOverdue(l, false, t0, {}, t0 + milliseconds(10001)), Overdue::kQueue);
  // Sent to compute after 9 s: the run has its own clock from then.
  EXPECT_EQ(RequestOverdue(l, true, t0, t0 + seconds(9), t0 + seconds(50)), Overdue::kNo);
  EXPECT_EQ(RequestOverdue(l, true, t0, t0 + seconds(9), t0 + seconds(109)), Overdue::kNo);
  EXPECT_EQ(RequestOverdue(l, true, t0, t0 + seconds(9), t0 + milliseconds(109001)), Overdue::kRun);
}

TEST(RequestDeadlines, ZeroIsNoLimit) {
  const RequestLimits none{};
  EXPECT_EQ(RequestOverdue(none, false, t0, {}, t0 + std::chrono::hours(1000)), Overdue::kNo);
  EXPECT_EQ(RequestOverdue(none, true, t0, t0, t0 + std::chrono::hours(1000)), Overdue::kNo);
}

}  // namespace
}  // namespace k3::server
