// One FormatBytes for every binary (common/format_bytes.h): the memory plan's units
// (docs/memory-plan.md's table: "2.19 GiB", "443.1 MiB", "4096 B"), in the services' stats lines too.
#include "common/format_bytes.h"

#include <gtest/gtest.h>

namespace k3 {
namespace {

TEST(FormatBytes, GiBWithTwoDecimalsMiBWithOneBytesBelow) {
  EXPECT_EQ(FormatBytes(0), "0 B");
  EXPECT_EQ(FormatBytes(4096), "4096 B");
  EXPECT_EQ(FormatBytes(12 * 1024), "12288 B");  // no KiB
  EXPECT_EQ(FormatBytes((1 << 20) - 1), "1048575 B");
  EXPECT_EQ(FormatBytes(1 << 20), "1.0 MiB");
  EXPECT_EQ(FormatBytes(850LL << 20), "850.0 MiB");
  EXPECT_EQ(FormatBytes(1LL << 30), "1.00 GiB");
  EXPECT_EQ(FormatBytes(1288490189), "1.20 GiB");
  EXPECT_EQ(FormatBytes(5LL << 40), "5120.00 GiB");  // no TiB
}

}  // namespace
}  // namespace k3
