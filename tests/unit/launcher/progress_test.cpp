// The progress line's text.
#include "launcher/progress.h"

#include <gtest/gtest.h>

namespace k3::launch {
namespace {

TEST(Progress, BytesWithPercentRateAndEta) {
  EXPECT_EQ(ProgressText("pinning trunk", 512.0 * 1024 * 1024, 2048.0 * 1024 * 1024, 2.0, true),
            "[launch] pinning trunk: 512.0 MiB of 2.00 GiB, 25%, 268 MB/s, ETA 6 s");
}

TEST(Progress, TokensAndFinished) {
  EXPECT_EQ(ProgressText("prefill", 30, 120, 3.0, false), "[launch] prefill: 30 of 120, 25%, 10.0 tokens/s, ETA 9 s");
  EXPECT_EQ(ProgressText("prefill", 120, 120, 4.0, false), "[launch] prefill: 120 of 120, 100%, 30.0 tokens/s");
  EXPECT_EQ(ProgressText("decoding", 0, 10, 0.0, false), "[launch] decoding: 0 of 10, 0%");
}

}  // namespace
}  // namespace k3::launch
