// common/stop_text.h: stop strings found across arbitrary splits of the text, with the
// possible start of a stop string held back until it is decided.
#include "common/stop_text.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace k3::launch {
namespace {

// Feeds `pieces` one by one; returns everything shown (Feed outputs, then Finish).
std::string FeedAll(StopTextMatcher& m, const std::vector<std::string>& pieces) {
  std::string out;
  for (const std::string& p : pieces) out += m.Feed(p);
  return out + m.Finish();
}

TEST(StopText, NoStopsPassesEverythingAtOnce) {
  StopTextMatcher m({});
  EXPECT_EQ(m.Feed("hello"), "hello");
  EXPECT_EQ(m.Feed(" world"), " world");
  EXPECT_EQ(m.Finish(), "");
  EXPECT_FALSE(m.matched());
}

TEST(StopText, MatchInsideOnePiece) {
  StopTextMatcher m({"END"});
  EXPECT_EQ(m.Feed("abcENDdef"), "abc");
  EXPECT_TRUE(m.matched());
  EXPECT_EQ(m.matched_stop(), "END");
  EXPECT_EQ(m.Feed("more"), "");
  EXPECT_EQ(m.Finish(), "");
}

TEST(StopText, MatchAcrossPiecesHoldsBackThePrefix) {
  StopTextMatcher m({"\n\nUser:"});
  EXPECT_EQ(m.Feed("Hi there."), "Hi there.");
  EXPECT_EQ(m.Feed("\n"), "");  // could start the stop
  EXPECT_EQ(m.held_bytes(), 1u);
  EXPECT_EQ(m.Feed("\nUs"), "");
  EXPECT_EQ(m.held_bytes(), 4u);
  EXPECT_EQ(m.Feed("er: next"), "");
  EXPECT_TRUE(m.matched());
  EXPECT_EQ(m.Finish(), "");
}

TEST(StopText, ReleasesHeldTextWhenItTurnsOutNotToMatch) {
  StopTextMatcher m({"abc"});
  EXPECT_EQ(m.Feed("xa"), "x");
  EXPECT_EQ(m.Feed("b"), "");
  EXPECT_EQ(m.Feed("d"), "abd");
  EXPECT_FALSE(m.matched());
}

TEST(StopText, OverlappingPrefixFindsTheLaterStart) {
  // "aab": after "aa" the held tail must be "aa" (both could start it); "aaab" matches at 1.
  StopTextMatcher m({"aab"});
  EXPECT_EQ(FeedAll(m, {"a", "a", "a", "b", "zz"}), "a");
  EXPECT_TRUE(m.matched());
}

TEST(StopText, UnfinishedPrefixIsShownAtTheEnd) {
  StopTextMatcher m({"STOP"});
  EXPECT_EQ(m.Feed("wait ST"), "wait ");
  EXPECT_EQ(m.Finish(), "ST");
  EXPECT_FALSE(m.matched());
}

TEST(StopText, EarliestOfSeveralStopsWins) {
  StopTextMatcher m({"world", "lo w", "o"});
  EXPECT_EQ(FeedAll(m, {"hel", "lo world"}), "hel");  // "lo w" starts at 3, "o" at 4
  EXPECT_EQ(m.matched_stop(), "lo w");
}

TEST(StopText, LongestWinsAtTheSameStart) {
  StopTextMatcher m({"ab", "abc"});
  EXPECT_EQ(m.Feed("xabcd"), "x");
  EXPECT_EQ(m.matched_stop(), "abc");
}

TEST(StopText, EverySplitOfTheTextGivesTheSameResult) {
  const std::string text = "one <end two <e three <end> four";
  for (size_t a = 0; a <= text.size(); ++a)
    for (size_t b = a; b <= text.size(); ++b) {
      StopTextMatcher m({"<end>", "x"});
      std::string shown;
      for (const std::string& piece : {text.substr(0, a), text.substr(a, b - a), text.substr(b)}) {
        const std::string got = m.Feed(piece);
        // Nothing shown may be (part of) text at or beyond the stop.
        shown += got;
        ASSERT_EQ(text.compare(0, shown.size(), shown), 0) << a << "," << b;
      }
      shown += m.Finish();
      ASSERT_EQ(shown, "one <end two <e three ") << a << "," << b;
      ASSERT_TRUE(m.matched());
    }
}

TEST(StopText, Utf8StopAcrossCharacters) {
  StopTextMatcher m({"ünd"});
  EXPECT_EQ(m.Feed("grü"), "gr");
  EXPECT_EQ(m.Feed("nd"), "");
  EXPECT_TRUE(m.matched());
}

TEST(StopText, EmptyStopStringsAreIgnored) {
  StopTextMatcher m({"", "z"});
  EXPECT_EQ(m.Feed("abc"), "abc");
  EXPECT_FALSE(m.matched());
}

}  // namespace
}  // namespace k3::launch
