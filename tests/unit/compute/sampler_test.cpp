// The sampler (services/compute/sampler.h) against its definition in docs/sampling.md: greedy is
// argmax, each filter keeps the documented set, penalties move the documented logits, a draw
// depends only on (seed, position), and many draws follow softmax(logits / T).
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <set>
#include <vector>

#include "generate.h"
#include "sampler.h"

namespace k3::compute {
namespace {

// The ids a sampler can return for these logits: drawn over many positions (different draws).
std::set<int32_t> Reachable(const std::vector<float>& logits, const SamplingParams& s, int positions = 4000) {
  std::set<int32_t> seen;
  std::vector<int32_t> ids;
  for (int pos = 0; pos < positions; ++pos) {
    ids.assign(static_cast<size_t>(pos), 0);  // position = ids.size(); id 0 is never penalised here
    seen.insert(SampleToken(logits.data(), static_cast<int64_t>(logits.size()), ids, 0, s));
  }
  return seen;
}

SamplingParams Sampled(float t = 1.0f) {
  SamplingParams s;
  s.temperature = t;
  s.seed = 1234;
  return s;
}

TEST(Sampler, TemperatureZeroIsArgmaxWithLowestIdOnTies) {
  const std::vector<float> l = {0.5f, 2.0f, -1.0f, 2.0f, 1.9f};
  SamplingParams s;  // defaults: greedy
  EXPECT_TRUE(IsGreedy(s));
  std::vector<int32_t> ids = {1, 1, 1};
  EXPECT_EQ(SampleToken(l.data(), 5, ids, 2, s), 1);
  EXPECT_EQ(SampleToken(l.data(), 5, ids, 2, s), Argmax(l.data(), 5));
  s.seed = 99;  // the seed plays no part in greedy choice
  EXPECT_EQ(SampleToken(l.data(), 5, ids, 2, s), 1);
  // Random logits: always Argmax.
  std::vector<float> r(1000);
  for (int trial = 0; trial < 50; ++trial) {
    for (size_t i = 0; i < r.size(); ++i) r[i] = static_cast<float>(std::sin(1.7 * i + trial) * 5);
    EXPECT_EQ(SampleToken(r.data(), 1000, ids, 0, SamplingParams{}), Argmax(r.data(), 1000));
  }
}

TEST(Sampler, TopKKeepsTheKMostLikely) {
  const std::vector<float> l = {1.0f, 3.0f, 2.0f, 0.0f, 2.5f, -1.0f};
  SamplingParams s = Sampled(5.0f);  // flat enough that every kept id shows up
  s.top_k = 3;
  EXPECT_EQ(Reachable(l, s), (std::set<int32_t>{1, 4, 2}));
  s.top_k = 1;
  EXPECT_EQ(Reachable(l, s), (std::set<int32_t>{1}));
  // Ties at the cut: the lower id stays.
  const std::vector<float> tie = {1.0f, 2.0f, 1.0f, 1.0f};
  s.top_k = 2;
  EXPECT_EQ(Reachable(tie, s), (std::set<int32_t>{1, 0}));
}

TEST(Sampler, TopPKeepsTheSmallestSetReachingP) {
  // Probabilities at T=1: proportional to 8, 4, 2, 1, 1 (sum 16): 0.5, 0.25, 0.125, 0.0625, 0.0625.
  const std::vector<float> l = {std::log(8.f), std::log(4.f), std::log(2.f), 0.f, 0.f};
  SamplingParams s = Sampled();
  s.top_p = 0.74f;  // 0.5 < 0.74 <= 0.75: ids 0 and 1
  EXPECT_EQ(Reachable(l, s), (std::set<int32_t>{0, 1}));
  s.top_p = 0.8f;  // needs 0.875: ids 0, 1, 2
  EXPECT_EQ(Reachable(l, s), (std::set<int32_t>{0, 1, 2}));
  s.top_p = 0.3f;
  EXPECT_EQ(Reachable(l, s), (std::set<int32_t>{0}));
}

TEST(Sampler, MinPDropsTokensBelowAFractionOfTheTop) {
  const std::vector<float> l = {std::log(8.f), std::log(4.f), std::log(2.f), 0.f, 0.f};
  SamplingParams s = Sampled();
  s.min_p = 0.24f;  // keep p >= 0.24 x p(top): 8, 4, 2 of 8 (away from the float-rounded 0.25)
  EXPECT_EQ(Reachable(l, s), (std::set<int32_t>{0, 1, 2}));
  s.min_p = 0.49f;
  EXPECT_EQ(Reachable(l, s), (std::set<int32_t>{0, 1}));
  s.min_p = 0.0f;
  EXPECT_EQ(Reachable(l, s), (std::set<int32_t>{0, 1, 2, 3, 4}));
}

TEST(Sampler, RepeatPenaltyDividesPositiveAndMultipliesNegativeLogitsInTheWindow) {
  // Greedy over penalised logits shows which logits moved.
  SamplingParams s;
  s.repeat_penalty = 2.0f;
  s.repeat_last_n = 2;
  const std::vector<float> l = {3.0f, 2.0f, -0.5f, -0.6f};
  // Window {0, 3}: 3 -> 1.5 (id 1 wins with 2.0).
  EXPECT_EQ(SampleToken(l.data(), 4, std::vector<int32_t>{1, 0, 3}, 0, s), 1);
  // Window {1, 2} (id 0 outside it): id 0 still wins.
  EXPECT_EQ(SampleToken(l.data(), 4, std::vector<int32_t>{0, 1, 2}, 0, s), 0);
  // Negative logits are multiplied: -0.5 -> -1.0 falls below -0.6.
  const std::vector<float> neg = {-0.5f, -0.6f};
  EXPECT_EQ(SampleToken(neg.data(), 2, std::vector<int32_t>{0}, 0, s), 1);
  // -1 = the whole sequence; 0 = off.
  s.repeat_last_n = -1;
  EXPECT_EQ(SampleToken(l.data(), 4, std::vector<int32_t>{0, 3, 3}, 0, s), 1);
  s.repeat_last_n = 0;
  EXPECT_EQ(SampleToken(l.data(), 4, std::vector<int32_t>{0, 0, 0}, 0, s), 0);
  // Applied once per distinct id, however often it occurs: 3 / 2 = 1.5 beats 1.4.
  const std::vector<float> once = {3.0f, 1.4f};
  s.repeat_last_n = 64;
  EXPECT_EQ(SampleToken(once.data(), 2, std::vector<int32_t>{0, 0, 0, 0}, 0, s), 0);
}

TEST(Sampler, PresenceAndFrequencyPenaltiesCountOnlyGeneratedIds) {
  SamplingParams s;
  s.frequency_penalty = 0.4f;
  const std::vector<float> l = {1.0f, 0.5f};
  // id 0 twice in the prompt, not generated: no penalty.
  EXPECT_EQ(SampleToken(l.data(), 2, std::vector<int32_t>{0, 0, 1}, 1, s), 0);
  // id 0 generated once: 1.0 - 0.4 = 0.6 > 0.5.
  EXPECT_EQ(SampleToken(l.data(), 2, std::vector<int32_t>{1, 0}, 1, s), 0);
  // id 0 generated twice: 1.0 - 0.8 = 0.2 < 0.5.
  EXPECT_EQ(SampleToken(l.data(), 2, std::vector<int32_t>{1, 0, 0}, 2, s), 1);
  // Presence: once per distinct id (three occurrences still cost 0.6 once).
  SamplingParams p;
  p.presence_penalty = 0.6f;
  const std::vector<float> l2 = {1.0f, 0.5f, 0.45f};
  EXPECT_EQ(SampleToken(l2.data(), 3, std::vector<int32_t>{0, 0, 0}, 3, p), 1);
  EXPECT_EQ(SampleToken(l2.data(), 3, std::vector<int32_t>{0, 0, 0, 1}, 4, p), 2);
  // Negative values encourage repeats.
  p.presence_penalty = -0.6f;
  EXPECT_EQ(SampleToken(l2.data(), 3, std::vector<int32_t>{2}, 1, p), 2);
}

TEST(Sampler, SameSeedAndPositionGiveTheSameId) {
  std::vector<float> l(5000);
  for (size_t i = 0; i < l.size(); ++i) l[i] = static_cast<float>(std::cos(0.37 * i) * 3);
  SamplingParams s = Sampled(1.5f);
  s.top_p = 0.95f;
  std::vector<int32_t> ids = {5, 6, 7, 8};
  const int32_t a = SampleToken(l.data(), 5000, ids, 1, s);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(SampleToken(l.data(), 5000, ids, 1, s), a);
  // The draw is a function of (seed, position) only: other ids, same length, same position.
  EXPECT_EQ(UniformAt(1234, 4), UniformAt(1234, 4));
  // Different seeds or positions give different draws.
  std::set<double> draws;
  for (uint64_t seed = 0; seed < 50; ++seed)
    for (uint64_t pos = 0; pos < 50; ++pos) {
      const double u = UniformAt(seed, pos);
      ASSERT_GE(u, 0.0);
      ASSERT_LT(u, 1.0);
      draws.insert(u);
    }
  EXPECT_EQ(draws.size(), 2500u);
}

TEST(Sampler, DrawsFollowTheTemperedSoftmax) {
  // 6 tokens; at T = 0.8, 20000 positions. Chi-square against softmax(l / T) with 5 degrees of
  // freedom: the fixed seed makes the statistic a constant, and 30 lies far in the tail (p < 1e-5)
  // for a correct sampler, while a sampler ignoring temperature scores in the hundreds.
  const std::vector<float> l = {1.0f, 0.2f, -0.5f, 0.9f, -2.0f, 0.0f};
  const double T = 0.8;
  SamplingParams s = Sampled(static_cast<float>(T));
  s.seed = 20261201;
  const int N = 20000;
  std::map<int32_t, int> count;
  std::vector<int32_t> ids;
  for (int pos = 0; pos < N; ++pos) {
    ids.assign(static_cast<size_t>(pos), 0);
    ++count[SampleToken(l.data(), 6, ids, 0, s)];
  }
  double z = 0;
  for (float v : l) z += std::exp(v / T);
  double chi2 = 0;
  for (int i = 0; i < 6; ++i) {
    const double want = N * std::exp(l[static_cast<size_t>(i)] / T) / z;
    chi2 += (count[i] - want) * (count[i] - want) / want;
  }
  EXPECT_LT(chi2, 30.0) << "counts far from softmax(logits / T)";
  // And the same at T = 0.8 differs from T = 2 (the test can tell temperatures apart).
  double chi2_wrong = 0, z2 = 0;
  for (float v : l) z2 += std::exp(v / 2.0);
  for (int i = 0; i < 6; ++i) {
    const double want = N * std::exp(l[static_cast<size_t>(i)] / 2.0) / z2;
    chi2_wrong += (count[i] - want) * (count[i] - want) / want;
  }
  EXPECT_GT(chi2_wrong, 100.0);
}

TEST(Sampler, LogprobsAreTheLogSoftmaxOfTheRawLogits) {
  const std::vector<float> l = {1.0f, 3.0f, 2.0f, 3.0f};
  const Logprobs lp = TokenLogprobs(l.data(), 4, 2, 3);
  double z = 0;
  for (float v : l) z += std::exp(static_cast<double>(v));
  EXPECT_NEAR(lp.logprob, 2.0 - std::log(z), 1e-12);
  ASSERT_EQ(lp.top.size(), 3u);
  EXPECT_EQ(lp.top[0].first, 1);  // tie at 3.0: lowest id first
  EXPECT_EQ(lp.top[1].first, 3);
  EXPECT_EQ(lp.top[2].first, 2);
  EXPECT_NEAR(lp.top[0].second, 3.0 - std::log(z), 1e-12);
  EXPECT_TRUE(TokenLogprobs(l.data(), 4, 0, 0).top.empty());
  // Large logits do not overflow.
  const std::vector<float> big = {1000.0f, 999.0f};
  EXPECT_NEAR(TokenLogprobs(big.data(), 2, 0, 0).logprob, -std::log1p(std::exp(-1.0)), 1e-12);
}

TEST(Sampler, PromptScorerSumsTheNextIdNllOverChunks) {
  // 3 positions, vocab 2; prompt 0,1,1: rows 0 and 1 are scored, row 2 predicts nothing.
  const std::vector<float> rows = {0.0f, 1.0f, 2.0f, 0.0f, 5.0f, 5.0f};
  const std::vector<int32_t> prompt = {0, 1, 1};
  PromptScorer whole{prompt};
  whole.Chunk(rows.data(), 3, 2);
  PromptScorer split{prompt};
  split.Chunk(rows.data(), 2, 2);
  split.Chunk(rows.data() + 4, 1, 2);
  const double want = std::log1p(std::exp(-1.0)) + (std::log(std::exp(2.0) + 1.0) - 0.0);
  EXPECT_EQ(whole.scored, 2);
  EXPECT_NEAR(whole.nll_sum, want, 1e-12);
  EXPECT_EQ(split.scored, 2);
  EXPECT_EQ(split.nll_sum, whole.nll_sum);
}

}  // namespace
}  // namespace k3::compute
