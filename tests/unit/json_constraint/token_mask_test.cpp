// Token masks from the trie walk against the definition: an id is allowed when feeding its
// bytes one by one through the matcher succeeds. And one request's progress (Constrained):
// the end ids come only once the value is complete, then the forced `after` ids.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "test_text.h"

namespace k3::json_constraint {
namespace {
using testing::MatcherFor;

// Every single byte, then random strings over JSON-ish bytes (as a BPE vocabulary has),
// then ids with no bytes (special tokens).
std::vector<std::string> RandomVocabulary(size_t n, uint64_t seed) {
  std::vector<std::string> v;
  for (int b = 0; b < 256; ++b) v.emplace_back(1, static_cast<char>(b));
  const std::string pieces[] = {"{\"", "\":", "\",\"", "\"}", "true", "null", ",\"", "name", "age", "tags",
                                "a", "b", " ", "\\n", "\\u00", "12", "0.", "e-", "\xc3", "\xa9", "\xe4\xb8\xad", "]}", "[\"", "},{"};
  std::mt19937_64 rng(seed);
  while (v.size() < n) {
    std::string t;
    const size_t parts = 1 + rng() % 3;
    for (size_t i = 0; i < parts; ++i) t += pieces[rng() % std::size(pieces)];
    v.push_back(t);
  }
  v.emplace_back();  // a special id
  v.emplace_back();
  return v;
}

bool FeedAll(const Matcher& m, const State& s, const std::string& bytes) {
  State cur = s, next;
  for (char c : bytes) {
    if (!m.Feed(cur, static_cast<uint8_t>(c), next)) return false;
    std::swap(cur, next);
  }
  return true;
}

TEST(TokenMask, EqualsFeedingEveryTokenAlongRandomWalks) {
  const Matcher m = MatcherFor(R"({"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"},
    "tags":{"type":"array","items":{"type":"string"}},"any":{}},"required":["name"]})");
  const std::vector<std::string> vocab = RandomVocabulary(3000, 11);
  const TokenTrie trie(vocab);
  TokenMasker masker(trie, m);
  std::mt19937_64 rng(3);
  int states = 0;
  for (int walk = 0; walk < 6; ++walk) {
    State s = m.Start();
    for (int step = 0; step < 40 && !m.Accepting(s); ++step) {
      const std::vector<uint64_t> bits = masker.Allowed(s);
      std::vector<int32_t> allowed;
      for (size_t id = 0; id < vocab.size(); ++id) {
        const bool want = !vocab[id].empty() && FeedAll(m, s, vocab[id]);
        ASSERT_EQ(Bit(bits, static_cast<int64_t>(id)), want) << "id " << id << " step " << step;
        if (want) allowed.push_back(static_cast<int32_t>(id));
      }
      ++states;
      ASSERT_FALSE(allowed.empty());
      const std::string& t = vocab[static_cast<size_t>(allowed[rng() % allowed.size()])];
      State next = s, tmp;
      for (char c : t) {
        ASSERT_TRUE(m.Feed(next, static_cast<uint8_t>(c), tmp));
        std::swap(next, tmp);
      }
      s = next;
    }
  }
  EXPECT_GT(states, 100);
  EXPECT_GT(masker.misses(), 0);
}

// The string interior's mask is shared by every string state and schema of a trie: masks from
// it equal the whole trie's walk and the definition, for strings in several schemas (free keys,
// array items, anyOf alternatives, a uuid), at UTF-8 and escape boundaries.
TEST(TokenMask, SharedStringInteriorEqualsTheFullWalk) {
  const std::vector<std::string> vocab = RandomVocabulary(3000, 12);
  const TokenTrie trie(vocab);
  const char* schemas[] = {
      R"({"type":"object","properties":{"s":{"type":"string"},"t":{"type":"array","items":{"type":"string"}}},"required":["s","t"]})",
      R"({"anyOf":[{"type":"string"},{"type":"object","properties":{"a":{"type":"string","format":"uuid"},"b":{}}}]})",
      R"({"type":"object"})"};
  std::mt19937_64 rng(5);
  int string_states = 0;
  for (const char* schema : schemas) {
    const Matcher m = MatcherFor(schema);
    TokenMasker masker(trie, m);
    for (int walk = 0; walk < 8; ++walk) {
      State s = m.Start();
      for (int step = 0; step < 30 && !m.Accepting(s); ++step) {
        const std::vector<uint64_t> bits = masker.Allowed(s);
        ASSERT_EQ(bits, masker.AllowedByFullWalk(s)) << schema << " step " << step;
        std::vector<int32_t> allowed;
        for (size_t id = 0; id < vocab.size(); ++id) {
          const bool want = !vocab[id].empty() && FeedAll(m, s, vocab[id]);
          ASSERT_EQ(Bit(bits, static_cast<int64_t>(id)), want) << schema << " id " << id << " step " << step;
          if (want) allowed.push_back(static_cast<int32_t>(id));
        }
        if (m.InPlainString(s)) ++string_states;
        ASSERT_FALSE(allowed.empty());
        const std::string& t = vocab[static_cast<size_t>(allowed[rng() % allowed.size()])];
        State next = s, tmp;
        for (char c : t) {
          ASSERT_TRUE(m.Feed(next, static_cast<uint8_t>(c), tmp));
          std::swap(next, tmp);
        }
        s = next;
      }
    }
  }
  EXPECT_GT(string_states, 30);
}

TEST(Constrained, EndsWithTheAfterIdsOnlyOnceTheValueIsComplete) {
  std::vector<std::string> vocab = {"{\"", "a", "\":", "1", "}", "2", "\"", "x"};
  vocab.resize(12);  // ids 8..11: special (no bytes)
  const TokenTrie trie(vocab);
  auto compiled = std::make_shared<Compiled>(CompileSchemaText(R"({"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]})"), trie);
  Constrained c(compiled, trie, {9, 10});  // e.g. a channel close, then the end id
  const std::vector<float> logits(12, 1.0f);
  std::vector<float> out;
  auto allowed = [&](std::vector<int32_t> generated) {
    c.Mask(logits.data(), 12, generated, out);
    std::vector<int32_t> ids;
    for (int32_t i = 0; i < 12; ++i)
      if (!std::isinf(out[static_cast<size_t>(i)])) ids.push_back(i);
    return ids;
  };
  EXPECT_EQ(allowed({}), (std::vector<int32_t>{0}));
  EXPECT_EQ(allowed({0}), (std::vector<int32_t>{1}));
  EXPECT_EQ(allowed({0, 1}), (std::vector<int32_t>{2, 6}));  // "\":" or "\"" close the key
  EXPECT_EQ(allowed({0, 1, 2}), (std::vector<int32_t>{3, 5}));
  EXPECT_EQ(allowed({0, 1, 2, 3}), (std::vector<int32_t>{3, 4, 5}));
  EXPECT_EQ(allowed({0, 1, 2, 3, 4}), (std::vector<int32_t>{9}));
  EXPECT_EQ(allowed({0, 1, 2, 3, 4, 9}), (std::vector<int32_t>{10}));
  EXPECT_TRUE(c.Finished(std::vector<int32_t>{0, 1, 2, 3, 4, 9, 10}));
  // Asked again for an earlier position (a speculative pass): the same answer.
  EXPECT_EQ(allowed({0, 1, 2}), (std::vector<int32_t>{3, 5}));
  EXPECT_EQ(allowed({0, 1, 2, 5}), (std::vector<int32_t>{3, 4, 5}));
}

}  // namespace
}  // namespace k3::json_constraint
