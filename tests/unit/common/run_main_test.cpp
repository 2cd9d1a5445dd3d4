// The one main() catch block (common/run_main.h), the flag parser of every binary
// (common/cli_parse.h) and the version line (common/version.h).
#include <CLI/CLI.hpp>
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "common/cli_parse.h"
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

// An app with one typed flag and one required flag, parsed from `args` (argv[0] prepended).
struct Parsed {
  bool go_on = false;
  int count = 0;
  std::string name;
};
Parsed Parse(std::vector<const char*> args) {
  Parsed p;
  CLI::App app{"k3-x: a test binary"};
  app.add_option("--count", p.count, "a number")->check(CLI::Range(1, 10));
  app.add_option("--name", p.name, "a text")->required();
  args.insert(args.begin(), "/some/dir/k3-x");
  p.go_on = ParseCommandLine(app, static_cast<int>(args.size()), args.data(), "k3-x");
  return p;
}

// The UsageError a command line gets, with its message; fails the test when there is none.
std::string UsageMessage(std::vector<const char*> args) {
  try {
    Parse(std::move(args));
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), kExitUsage) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no UsageError";
  return "";
}

TEST(CommandLine, GoodFlagsGoOn) {
  const Parsed p = Parse({"--name", "a", "--count", "7"});
  EXPECT_TRUE(p.go_on);
  EXPECT_EQ(p.count, 7);
  EXPECT_EQ(p.name, "a");
}

TEST(CommandLine, VersionAndHelpPrintOnStdoutAndStop) {
  testing::internal::CaptureStdout();
  EXPECT_FALSE(Parse({"--version"}).go_on);  // before --name is missing
  EXPECT_EQ(testing::internal::GetCapturedStdout(), std::string("k3-x ") + kVersion + "\n");
  testing::internal::CaptureStdout();
  EXPECT_FALSE(Parse({"--help"}).go_on);
  const std::string help = testing::internal::GetCapturedStdout();
  EXPECT_NE(help.find("Usage: k3-x"), std::string::npos) << help;  // the binary's name, not argv[0]
  EXPECT_NE(help.find("--count"), std::string::npos) << help;
  EXPECT_NE(help.find("--version"), std::string::npos) << help;
}

TEST(CommandLine, EveryRefusalIsOneUsageLine) {
  const std::vector<std::vector<const char*>> bad = {
      {"--name", "a", "--no-such-flag"},  // unknown flag
      {"--name", "a", "--count", "many"},  // not a number
      {"--name", "a", "--count", "11"},    // out of range
      {"--count", "3"},                    // required flag missing
      {"--name"},                          // value missing
      {"--name", "a", "stray"},            // unexpected positional
  };
  for (const auto& args : bad) {
    const std::string m = UsageMessage(args);
    EXPECT_FALSE(m.empty());
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
    EXPECT_NE(m.find("--help"), std::string::npos) << m;
  }
  EXPECT_NE(UsageMessage({"--name", "a", "--no-such-flag"}).find("--no-such-flag"), std::string::npos);
  EXPECT_NE(UsageMessage({"--count", "3"}).find("--name"), std::string::npos);
}

TEST(CommandLine, ThroughRunMainABadFlagIsExit2AndOnePrefixedLine) {
  testing::internal::CaptureStderr();
  testing::internal::CaptureStdout();
  const int rc = RunMain("k3-x", [] { return Parse({"--name", "a", "--count", "many"}).go_on ? 0 : 9; });
  const std::string out = testing::internal::GetCapturedStdout();
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(rc, kExitUsage);
  EXPECT_EQ(out, "");
  ASSERT_EQ(err.rfind("k3-x: ", 0), 0u) << err;
  EXPECT_EQ(err.find('\n'), err.size() - 1) << err;
}

TEST(CommandLine, ReasonFoldsLinesIntoOne) {
  EXPECT_EQ(UsageReason("first\n  second  \nthird\n"), "first; second; third (see --help)");
  EXPECT_EQ(UsageReason("only"), "only (see --help)");
  EXPECT_EQ(UsageReason("\n"), "bad command line (see --help)");
}

TEST(Version, LineIsBinaryThenVersion) {
  EXPECT_EQ(VersionLine("k3-launch"), std::string("k3-launch ") + kVersion);
  EXPECT_NE(std::string(kVersion), "");
}

}  // namespace
}  // namespace k3
