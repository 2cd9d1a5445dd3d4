// The read-window rule (common/read_window.h): the window covers the run, starts and ends on
// 4096 bounds except at the end of the file, and WidenedBytes bounds it for any start.
#include <gtest/gtest.h>

#include "common/read_window.h"

namespace k3 {
namespace {

TEST(ReadWindow, Rounding) {
  EXPECT_EQ(AlignDown<uint64_t>(0), 0u);
  EXPECT_EQ(AlignDown<uint64_t>(4095), 0u);
  EXPECT_EQ(AlignDown<uint64_t>(4096), 4096u);
  EXPECT_EQ(AlignUp<uint64_t>(0), 0u);
  EXPECT_EQ(AlignUp<uint64_t>(1), 4096u);
  EXPECT_EQ(AlignUp<uint64_t>(4096), 4096u);
  EXPECT_EQ(AlignUp<int64_t>(4097), 8192);
  EXPECT_EQ(WidenedBytes(1), 8192);
  EXPECT_EQ(WidenedBytes(4096), 8192);
}

TEST(ReadWindow, WidenCoversTheRunAndStopsAtTheFileEnd) {
  const ReadRun a = Widen({2, 5000, 9000, 4000}, 1 << 20);
  EXPECT_EQ(a.shard, 2);
  EXPECT_EQ(a.wbegin, 4096u);
  EXPECT_EQ(a.wend, 12288u);
  EXPECT_EQ(a.lead(), 904u);
  EXPECT_EQ(a.length(), 4000u);
  EXPECT_EQ(a.wlength(), 8192u);
  // The last block of a file is short: the window ends with the file.
  const ReadRun b = Widen({0, 5000, 9000, 4000}, 9100);
  EXPECT_EQ(b.wend, 9100u);
  // Aligned runs are read as they are.
  const ReadRun c = Widen({0, 8192, 16384, 8192}, 1 << 20);
  EXPECT_EQ(c.wbegin, 8192u);
  EXPECT_EQ(c.wend, 16384u);
  EXPECT_EQ(c.lead(), 0u);
}

TEST(ReadWindow, WidenedBytesBoundsEveryStart) {
  for (int64_t n : {1, 100, 4095, 4096, 4097, 12345}) {
    for (int64_t begin : {0, 1, 2048, 4095, 4096, 8191}) {
      const ReadRun r = Widen({0, begin, begin + n, n}, 1 << 20);
      EXPECT_LE(static_cast<int64_t>(r.wlength()), WidenedBytes(n)) << n << " at " << begin;
      EXPECT_LE(r.wbegin, r.begin);
      EXPECT_GE(r.wend, r.end);
    }
  }
}

}  // namespace
}  // namespace k3
