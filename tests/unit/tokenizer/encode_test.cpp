#include <gtest/gtest.h>

#include <random>

#include "common/error.h"
#include "bpe.h"
#include "pretokenizer.h"
#include "test_vocab.h"
#include "utf8.h"

namespace k3::tok {
namespace {

using testing::TestNumRanks;
using testing::TestTokenizer;

std::vector<std::string> Split(std::string_view s, bool fast = true) {
  static const SplitPattern pattern;
  Splitter sp(pattern, fast);
  std::vector<std::string> out;
  sp.Split(s, [&](std::string_view p) { out.emplace_back(p); });
  return out;
}

using Pieces = std::vector<std::string>;

// Expected pieces worked out by hand from the pattern's alternatives (A..H).
TEST(PreTokenizer, HandWorkedSplits) {
  EXPECT_EQ(Split("Hello world"), (Pieces{"Hello", " world"}));
  EXPECT_EQ(Split("  x"), (Pieces{" ", " x"}));                       // F leaves one space
  EXPECT_EQ(Split("don't STOP'S"), (Pieces{"don't", " STOP'S"}));     // A, B with suffix
  EXPECT_EQ(Split("12345"), (Pieces{"123", "45"}));                   // C
  EXPECT_EQ(Split("a\n\n b"), (Pieces{"a", "\n\n", " b"}));           // E
  EXPECT_EQ(Split("x  \n  y"), (Pieces{"x", "  \n", " ", " y"}));     // E, F
  EXPECT_EQ(Split("end  "), (Pieces{"end", "  "}));                    // F at end of text
  EXPECT_EQ(Split("foo(bar);\n"), (Pieces{"foo", "(bar", ");\n"}));   // A prefix, D + newline
  EXPECT_EQ(Split("a/b"), (Pieces{"a", "/b"}));
  EXPECT_EQ(Split("HTTPServer"), (Pieces{"HTTPServer"}));
  EXPECT_EQ(Split("\xe4\xbd\xa0\xe5\xa5\xbdworld"), (Pieces{"\xe4\xbd\xa0\xe5\xa5\xbd", "world"}));  // H
  // U+3002 is Script=Common (only Script_Extensions include Han): a symbol, so D takes "。\n".
  EXPECT_EQ(Split("\xe5\xa5\xbd\xe3\x80\x82\n"), (Pieces{"\xe5\xa5\xbd", "\xe3\x80\x82\n"}));
  // Han is masked out of the letter classes: "a你" is two pieces.
  EXPECT_EQ(Split("a\xe4\xbd\xa0"), (Pieces{"a", "\xe4\xbd\xa0"}));
  EXPECT_EQ(Split("caf\xc3\xa9 x"), (Pieces{"caf\xc3\xa9", " x"}));
  EXPECT_EQ(Split("a\xc2\xa0\xc2\xa0" "b"), (Pieces{"a", "\xc2\xa0", "\xc2\xa0" "b"}));  // NBSP is \s
  EXPECT_EQ(Split("x\xc2\x85y"), (Pieces{"x", "\xc2\x85y"}));  // U+0085 is White_Space: prefix of A
  EXPECT_EQ(Split("it'\xc5\xbf"), (Pieces{"it'\xc5\xbf"}));     // (?i) folds U+017F to s
}

// The hand-written matcher must agree with PCRE2 alone on every script and class mix.
TEST(PreTokenizer, FastPathMatchesPcre) {
  const char* alphabet[] = {"a", "b", "Z", "Q", "0", "7", " ", " ", "\t", "\n", "\r", "'", "s", "t", "r", "e",
                            "l", "v", "d", "m", ".", "(", "_", "\x01", "\xc3\xa9", "\xe4\xbd\xa0", "\xc2\xa0",
                            "\xe3\x80\x80", "\xd9\xa3", "\xc5\xbf", "\xe2\x82\xac", "\xcc\x81",
                            // Д д Σ ω ǅ(Lt) ʰ(Lm) あ(Lo) ⺀(Han, So) 〇(Han, Nl) 々(Han, Lm) Ⅻ(Nl) ²(No)
                            "\xd0\x94", "\xd0\xb4", "\xce\xa3", "\xcf\x89", "\xc7\x85", "\xca\xb0",
                            "\xe3\x81\x82", "\xe2\xba\x80", "\xe3\x80\x87", "\xe3\x80\x85", "\xe2\x85\xab",
                            "\xc2\xb2",
                            // U+2028, NEL, K (Kelvin), 😀, ZWJ, U+0903 (Mc), 𠀀 (Han, 4 bytes), ٣ , ـ (Lm)
                            "\xe2\x80\xa8", "\xc2\x85", "\xe2\x84\xaa", "\xf0\x9f\x98\x80", "\xe2\x80\x8d",
                            "\xe0\xa4\x83", "\xf0\xa0\x80\x80", "\xd9\x80"};
  std::mt19937 rng(11);
  for (int iter = 0; iter < 20000; ++iter) {
    std::string s;
    const int len = 1 + static_cast<int>(rng() % 24);
    for (int i = 0; i < len; ++i) s += alphabet[rng() % (sizeof(alphabet) / sizeof(alphabet[0]))];
    ASSERT_EQ(Split(s, true), Split(s, false)) << "input: " << s;
  }
}

// Issue 12: PCRE2_ANCHORED passed at match time turned the JIT off; it is a compile option now.
TEST(PreTokenizer, PcreJitIsUsed) {
  const SplitPattern pattern;
  EXPECT_GT(pattern.JitSize(), 0u);
}

TEST(Bpe, MergesLowestRankFirst) {
  const RankTable& r = TestTokenizer().vocab().ranks();
  std::vector<uint32_t> out;
  BpeEncode(r, "abc", &out);  // "ab" (256) ranks below "bc" (257)
  EXPECT_EQ(out, (std::vector<uint32_t>{256, 'c'}));
  out.clear();
  BpeEncode(r, "aaa", &out);  // tie between the two "aa" pairs: leftmost wins
  EXPECT_EQ(out, (std::vector<uint32_t>{258, 'a'}));
  out.clear();
  BpeEncode(r, "hello", &out);  // whole piece is a token
  EXPECT_EQ(out, (std::vector<uint32_t>{r.Find("hello")}));
  out.clear();
  BpeEncode(r, "xyz", &out);  // no merges at all
  EXPECT_EQ(out, (std::vector<uint32_t>{'x', 'y', 'z'}));
}

TEST(Bpe, LinearAndHeapAgree) {
  const RankTable& r = TestTokenizer().vocab().ranks();
  CachedRanks memo(r);
  std::mt19937 rng(3);
  const char letters[] = "abchelowrd  \n";
  for (int iter = 0; iter < 2000; ++iter) {
    std::string s(1 + rng() % 300, 'a');
    for (auto& c : s) c = letters[rng() % (sizeof(letters) - 1)];
    std::vector<uint32_t> a, b;
    BpeMergeLinear(r, s, &a);
    BpeMergeHeap(r, s, &b);
    ASSERT_EQ(a, b) << s;
    std::vector<uint32_t> c, d;  // the encoder's path: the same merges through the memo
    BpeMergeLinear(memo, s, &c);
    BpeMergeHeap(memo, s, &d);
    ASSERT_EQ(a, c) << s;
    ASSERT_EQ(a, d) << s;
  }
}

TEST(Tokenizer, RandomBytesRoundTrip) {
  const Tokenizer& t = TestTokenizer();
  std::mt19937 rng(5);
  for (int iter = 0; iter < 500; ++iter) {
    std::string s(rng() % 200, '\0');
    for (auto& c : s) c = static_cast<char>(rng() % 4 == 0 ? rng() : "ab hello\n\xe4\xbd\xa0"[rng() % 12]);
    const auto ids = t.Encode(s, false);
    for (uint32_t id : ids) ASSERT_LT(id, TestNumRanks());
    ASSERT_EQ(t.Decode(ids), s);
  }
}

TEST(Tokenizer, IllFormedBytesAreSingleByteTokens) {
  const Tokenizer& t = TestTokenizer();
  // "ab" merges, "\xff" stands alone and splits the text, "\xe4\xbd" is a truncated char.
  EXPECT_EQ(t.Encode("ab\xff" "ab", false), (std::vector<uint32_t>{256, 0xff, 256}));
  EXPECT_EQ(t.Encode("\xe4\xbd", false), (std::vector<uint32_t>{0xe4, 0xbd}));
  EXPECT_EQ(t.Encode("\xe4\xbd\xa0", false), (std::vector<uint32_t>{t.vocab().ranks().Find("\xe4\xbd\xa0")}));
}

TEST(Tokenizer, SpecialsOnlyWhenAllowed) {
  const Tokenizer& t = TestTokenizer();
  const uint32_t eom = t.vocab().AddedId("<|end_of_msg|>");
  const std::string text = "hi<|end_of_msg|>[EOS]";
  const auto plain = t.Encode(text, false);
  for (uint32_t id : plain) EXPECT_LT(id, TestNumRanks());
  EXPECT_EQ(t.Decode(plain), text);
  const auto ctl = t.Encode(text, true);
  EXPECT_EQ(ctl, (std::vector<uint32_t>{'h', 'i', eom, t.vocab().AddedId("[EOS]")}));
  EXPECT_EQ(t.Decode(ctl), text);
  // Partial special text is ordinary.
  for (uint32_t id : t.Encode("<|end_of_ms", true)) EXPECT_LT(id, TestNumRanks());
}

TEST(Tokenizer, DecodeRejectsUnknownIds) {
  const Tokenizer& t = TestTokenizer();
  for (uint32_t bad : {TestNumRanks() + 100, TestNumRanks() + 256, 0xFFFFFFFFu}) {
    try {
      t.Decode({'a', bad});
      FAIL() << bad;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), kExitBadInput);
      EXPECT_NE(std::string(e.what()).find("unknown token id " + std::to_string(bad) + " at position 1"),
                std::string::npos);
    }
  }
}

TEST(StreamDecoder, NeverEmitsPartialCharacters) {
  const Tokenizer& t = TestTokenizer();
  // Byte-level tokens split multi-byte characters across ids.
  const std::string text = "h\xc3\xa9llo \xf0\x9f\x98\x80 \xe4\xbd\xa0\xe5\xa5\xbd!";
  const auto ids = t.Encode(text, false);
  StreamDecoder d(t);
  std::string all;
  size_t held_back = 0;
  for (uint32_t id : ids) {
    const std::string chunk = d.Push(id);
    EXPECT_TRUE(IsValidUtf8(chunk)) << "partial character emitted";
    if (chunk.empty()) ++held_back;
    all += chunk;
  }
  all += d.Finish();
  EXPECT_EQ(all, text);
  EXPECT_GT(held_back, 0u);  // the test did exercise holding back
}

TEST(StreamDecoder, PassesIllFormedBytesAndFlushesTail) {
  const Tokenizer& t = TestTokenizer();
  StreamDecoder d(t);
  EXPECT_EQ(d.Push(0xff), "\xff");  // can never become valid: not held
  EXPECT_EQ(d.Push('a'), "a");
  EXPECT_EQ(d.Push(0xe4), "");
  EXPECT_EQ(d.Push(0xbd), "");
  EXPECT_EQ(d.Push('b'), "\xe4\xbd" "b");  // the sequence was broken: released as is
  EXPECT_EQ(d.Push(0xf0), "");
  EXPECT_EQ(d.Finish(), "\xf0");
  EXPECT_THROW(d.Push(TestNumRanks() + 100), Error);
}

}  // namespace
}  // namespace k3::tok
