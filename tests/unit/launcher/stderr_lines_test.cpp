// The services' stderr relayed a whole line at a time (launcher/stderr_lines.h), and quiet
// mode's filter: only error lines, never "[service] ..." progress lines.
#include "launcher/stderr_lines.h"

#include <gtest/gtest.h>

#include <string>

namespace k3::launch {
namespace {

TEST(StderrLines, PartialLinesWaitForTheirEndOrTheExit) {
  StderrLines l;
  const std::string a = "[reader] pinned\nk3-trunk-rea";
  l.Append(a.data(), a.size());
  EXPECT_EQ(l.Take(false), std::vector<std::string>({"[reader] pinned"}));
  const std::string b = "der: read failed\nhalf";
  l.Append(b.data(), b.size());
  EXPECT_EQ(l.Take(false), std::vector<std::string>({"k3-trunk-reader: read failed"}));
  EXPECT_TRUE(l.Take(false).empty());
  EXPECT_EQ(l.Take(true), std::vector<std::string>({"half"}));  // the service exited
  EXPECT_TRUE(l.Take(true).empty());
}

TEST(StderrLines, AnOverlongPartialLineGoesOutAsItIs) {
  StderrLines l;
  const std::string big(kMaxHeldStderr + 1, 'x');
  l.Append(big.data(), big.size());
  EXPECT_EQ(l.Take(false), std::vector<std::string>({big}));
  const std::string fits(kMaxHeldStderr, 'y');
  l.Append(fits.data(), fits.size());
  EXPECT_TRUE(l.Take(false).empty());
}

TEST(StderrLines, QuietShowsOnlyErrorLines) {
  EXPECT_TRUE(ShowServiceLine("[compute] step 3", false));
  EXPECT_TRUE(ShowServiceLine("", false));
  EXPECT_FALSE(ShowServiceLine("[compute] step 3", true));
  EXPECT_FALSE(ShowServiceLine("", true));
  EXPECT_TRUE(ShowServiceLine("k3-compute: --dump-logits: cannot write /dev/full", true));
}

}  // namespace
}  // namespace k3::launch
