// How a run ends (launcher/run_end.h) against docs/pipeline.md "Stopping": a requested stop,
// its stop_reason, and the stop's grace.
#include "launcher/run_end.h"

#include <gtest/gtest.h>
#include <signal.h>

namespace k3::launch {
namespace {

using ipc::compute::StopReason;

TEST(RunEnd, AStopSignalBeforeDoneOrAnInterruptedDoneIsARequestedStop) {
  EXPECT_TRUE(RequestedStop(true, false, std::nullopt));
  EXPECT_TRUE(RequestedStop(true, true, StopReason::kInterrupted));
  EXPECT_FALSE(RequestedStop(true, true, StopReason::kLength));  // compute finished first
  EXPECT_FALSE(RequestedStop(false, false, std::nullopt));
}

TEST(RunEnd, StopReasons) {
  const std::string why = "compute: killed by signal 9";
  EXPECT_EQ(StopReasonText(false, &why, false, 0), why);
  EXPECT_EQ(StopReasonText(false, nullptr, false, 0), "run finished");
  EXPECT_EQ(StopReasonText(true, &why, true, SIGINT), "stdout closed");
  EXPECT_EQ(StopReasonText(true, nullptr, false, SIGINT), "interrupted by SIGINT");
  EXPECT_EQ(StopReasonText(true, nullptr, false, SIGHUP), "interrupted by SIGHUP");
  EXPECT_STREQ(SignalName(SIGTERM), "SIGTERM");
  EXPECT_STREQ(SignalName(SIGUSR1), "a signal");
}

TEST(RunEnd, ARequestedStopWaitsAtMost1point2SecondsThen300Ms) {
  EXPECT_EQ(StopGraceFor(true, 10).exit, std::chrono::milliseconds(1200));
  EXPECT_EQ(StopGraceFor(true, 10).after_sigterm, std::chrono::milliseconds(300));
  EXPECT_EQ(StopGraceFor(true, 0.5).exit, std::chrono::milliseconds(500));
  EXPECT_EQ(StopGraceFor(false, 10).exit, std::chrono::milliseconds(10000));
  EXPECT_EQ(StopGraceFor(false, 10).after_sigterm, std::chrono::milliseconds(2000));
}

}  // namespace
}  // namespace k3::launch
