// The one id-list parser (common/id_list.h): what it accepts and what it refuses.
#include <gtest/gtest.h>

#include <cstdint>

#include "common/id_list.h"
#include "test_util.h"

namespace k3 {
namespace {

using V = std::vector<int64_t>;

TEST(IdList, AcceptsDigitsAndCommas) {
  EXPECT_EQ(ParseIdList("", "--ids", 10), V{});
  EXPECT_EQ(ParseIdList("0", "--ids", 10), V{0});
  EXPECT_EQ(ParseIdList("7,0,3,3", "--ids", 10), (V{7, 0, 3, 3}));  // order and duplicates kept
  EXPECT_EQ(ParseIdList("0009", "--ids", 10), V{9});                 // leading zeros are digits
  EXPECT_EQ(ParseIdList("2147483647", "--ids", int64_t{INT32_MAX} + 1), V{INT32_MAX});
  EXPECT_EQ(ParseIdList("4294967295", "--ids", int64_t{1} << 32), V{4294967295});
}

TEST(IdList, RefusesEverythingElse) {
  for (const char* bad : {",", "1,", ",1", "1,,2", " 1", "1 ", "1, 2", "-1", "+1", "1.5", "0x1", "a", "1;2", "\n"}) {
    test::ExpectError([&] { ParseIdList(bad, "--ids", 100); }, kExitUsage, {"--ids: '"});
  }
}

TEST(IdList, LimitAndOverflow) {
  test::ExpectError([&] { ParseIdList("10", "--pin", 10); }, kExitUsage, {"--pin: '10'", "[0, 10)"});
  test::ExpectError([&] { ParseIdList("2147483648", "--ids", int64_t{INT32_MAX} + 1); }, kExitUsage,
                    {"out of range"});
  // Far past int64: refused, not wrapped.
  test::ExpectError([&] { ParseIdList("99999999999999999999999", "--ids", INT64_MAX); }, kExitUsage,
                    {"out of range"});
  EXPECT_EQ(ParseIdList("9223372036854775806", "--ids", INT64_MAX), V{INT64_MAX - 1});
  test::ExpectError([&] { ParseIdList("0", "--pin", 0); }, kExitUsage, {"out of range"});
}

TEST(IdList, ExitCodeIsTheCallers) {
  test::ExpectError([&] { ParseIdList("1,x", "ids.txt", 100, kExitBadInput); }, kExitBadInput, {"ids.txt: 'x'"});
}

}  // namespace
}  // namespace k3
