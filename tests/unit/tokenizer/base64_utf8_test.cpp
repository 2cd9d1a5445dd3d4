#include <gtest/gtest.h>

#include <random>

#include "base64.h"
#include "utf8.h"

namespace k3::tok {
namespace {

TEST(Base64, Rfc4648Vectors) {
  const std::pair<const char*, const char*> v[] = {{"Zg==", "f"},         {"Zm8=", "fo"},
                                                   {"Zm9v", "foo"},       {"Zm9vYg==", "foob"},
                                                   {"Zm9vYmE=", "fooba"}, {"Zm9vYmFy", "foobar"}};
  for (const auto& [enc, dec] : v) {
    auto d = Base64Decode(enc);
    ASSERT_TRUE(d) << enc;
    EXPECT_EQ(*d, dec);
    EXPECT_EQ(Base64Encode(dec), enc);
  }
}

TEST(Base64, RejectsMalformed) {
  for (const char* bad : {"", "Zg=", "Zg", "Z===", "Zh==", "Zm9=", "Zm9v!A==", "=Zg=", "Zg==Zg==", "Zm 9"})
    EXPECT_FALSE(Base64Decode(bad)) << bad;
}

TEST(Base64, RandomRoundTrip) {
  std::mt19937 rng(7);
  for (int i = 0; i < 500; ++i) {
    std::string s(1 + rng() % 40, '\0');
    for (auto& c : s) c = static_cast<char>(rng());
    auto d = Base64Decode(Base64Encode(s));
    ASSERT_TRUE(d);
    EXPECT_EQ(*d, s);
  }
}

TEST(Utf8, WellFormedness) {
  EXPECT_TRUE(IsValidUtf8("plain ascii"));
  EXPECT_TRUE(IsValidUtf8("\xc3\xa9\xe4\xbd\xa0\xf0\x9f\x98\x80\xf4\x8f\xbf\xbf"));
  // Overlongs, surrogates, above U+10FFFF, lone continuation, truncated sequences.
  for (const char* bad : {"\xc0\xaf", "\xc1\xbf", "\xe0\x80\xaf", "\xf0\x80\x80\xaf", "\xed\xa0\x80", "\xed\xbf\xbf",
                          "\xf4\x90\x80\x80", "\xf5\x80\x80\x80", "\x80", "\xbf", "\xc3", "\xe4\xbd", "\xf0\x9f\x98",
                          "\xfe", "\xff"})
    EXPECT_FALSE(IsValidUtf8(bad)) << std::string(bad).size();
  EXPECT_EQ(Utf8ValidPrefix("abcdefghij\xff"), 10u);
  EXPECT_EQ(Utf8ValidPrefix("\xe4\xbd\xa0\xe4\xbd"), 3u);
}

TEST(Utf8, IncompleteTail) {
  EXPECT_EQ(Utf8IncompleteTail("abc"), 0u);
  EXPECT_EQ(Utf8IncompleteTail("a\xe4"), 1u);
  EXPECT_EQ(Utf8IncompleteTail("a\xe4\xbd"), 2u);
  EXPECT_EQ(Utf8IncompleteTail("a\xe4\xbd\xa0"), 0u);
  EXPECT_EQ(Utf8IncompleteTail("\xf0\x9f\x98"), 3u);
  EXPECT_EQ(Utf8IncompleteTail("\xf0\x9f\x98\x80"), 0u);
  // Can never complete: held back would stall the stream forever.
  EXPECT_EQ(Utf8IncompleteTail("a\x80"), 0u);
  EXPECT_EQ(Utf8IncompleteTail("a\xff"), 0u);
  EXPECT_EQ(Utf8IncompleteTail("\xed\xa0"), 0u);  // surrogate
  EXPECT_EQ(Utf8IncompleteTail("\xe0\x80"), 0u);  // overlong
  EXPECT_EQ(Utf8IncompleteTail("\xf4\x90"), 0u);  // above U+10FFFF
  EXPECT_EQ(Utf8IncompleteTail("\xc0"), 0u);
}

}  // namespace
}  // namespace k3::tok
