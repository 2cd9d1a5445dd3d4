// The one main() catch block (common/run_main.h) and the version line (common/version.h).
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "common/run_main.h"
#include "common/version.h"

namespace k3 {
namespace {

TEST(RunMain, ReturnsTheBodysCode) {
  EXPECT_EQ(RunMain("k3-x", [] { return 0; }), 0);
  EXPECT_EQ(RunMain("k3-x", [] { return 5; }), 5);
}

TEST(RunMain, ErrorsBecomeOneLineAndTheirCode) {
  testing::internal::CaptureStderr();
  EXPECT_EQ(RunMain("k3-x", []() -> int { throw BadModel("config.json: bad"); }), kExitBadModel);
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "k3-x: config.json: bad\n");
  testing::internal::CaptureStderr();
  EXPECT_EQ(RunMain("k3-y", []() -> int { throw std::runtime_error("boom"); }), kExitRuntime);
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "k3-y: boom\n");
}

TEST(RunMain, ClosedStdoutIsAQuietRequestedStop) {
  testing::internal::CaptureStderr();
  EXPECT_EQ(RunMain("k3-x", []() -> int { throw StdoutClosed(); }), kExitInterrupted);
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
}

TEST(RunMain, OnErrorHearsCodeAndMessage) {
  int seen = -1;
  std::string said;
  testing::internal::CaptureStderr();
  const int rc = RunMain("k3-z", []() -> int { throw UsageError("--x: bad"); },
                         [&](ExitCode c, const std::string& m) {
                           seen = c;
                           said = m;
                         });
  testing::internal::GetCapturedStderr();
  EXPECT_EQ(rc, kExitUsage);
  EXPECT_EQ(seen, kExitUsage);
  EXPECT_EQ(said, "--x: bad");
  bool called = false;
  RunMain("k3-z", [] { return 0; }, [&](ExitCode, const std::string&) { called = true; });
  EXPECT_FALSE(called);
}

TEST(Version, LineIsBinaryThenVersion) {
  EXPECT_EQ(VersionLine("k3-launch"), std::string("k3-launch ") + kVersion);
  EXPECT_NE(std::string(kVersion), "");
}

}  // namespace
}  // namespace k3
