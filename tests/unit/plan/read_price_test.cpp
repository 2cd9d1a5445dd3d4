// The read price (common/plan/read_price.h) against values worked out here from the formula
// with the release's numbers (issue 22: 896 experts, top 16, 92 MoE layers, 17,547,264-byte
// experts), never by calling the code for the expected side.
#include "common/plan/read_price.h"

#include <gtest/gtest.h>

#include <cmath>

#include "common/error.h"

namespace k3::plan {
namespace {

constexpr double kExpert = 17547264.0;

ReadModel Release(int64_t slots, int64_t streamed_trunk) {
  ReadModel r;
  r.moe_layers = 92;
  r.experts = 896;
  r.top_k = 16;
  r.expert_bytes = 17547264;
  r.expert_slots = slots;
  r.streamed_trunk = streamed_trunk;
  return r;
}

TEST(ReadPrice, DistinctExpertsOfAChunkUnderFlatRouting) {
  EXPECT_NEAR(DistinctExperts(896, 16, 1), 16.0, 1e-9);  // one token: its top_k
  // Two tokens: 16 + 16·(880/896) (the second token's experts the first did not pick).
  EXPECT_NEAR(DistinctExperts(896, 16, 2), 16.0 + 16.0 * 880.0 / 896.0, 1e-9);
  // Issue 22: a 128-token chunk asks for about 807 of 896; 896·(1 − (55/56)^128) by hand is 806.73.
  EXPECT_NEAR(DistinctExperts(896, 16, 128), 896.0 * (1.0 - std::pow(55.0 / 56.0, 128)), 1e-6);
  EXPECT_NEAR(DistinctExperts(896, 16, 128), 806.7, 0.05);
  EXPECT_NEAR(DistinctExperts(896, 16, 2048), 896.0, 1e-6);  // every expert, once
  EXPECT_EQ(DistinctExperts(896, 16, 0), 0.0);
  EXPECT_NEAR(DistinctExperts(4, 4, 3), 4.0, 1e-12);  // top_k = E: all of them at once
}

TEST(ReadPrice, ReleaseAtTheDesktopConfigsChunk) {
  // configs/desktop.toml before issue 22: chunk 128, 23 layers + lm_head pinned, ~76 GB of trunk
  // streamed, 35 expert slots. Issue 22's figures: 1.30 TB of experts per chunk, 10.8 GB per prompt token.
  const int64_t trunk = 76'000'000'000;
  const ReadModel r = Release(35, trunk);
  const double miss = 1.0 - 35.0 / (92.0 * 896.0);
  const double experts128 = 92.0 * 896.0 * (1.0 - std::pow(55.0 / 56.0, 128)) * miss * kExpert;
  const ReadPrice p = PriceAt(r, 128);
  EXPECT_EQ(p.chunk, 128);
  EXPECT_NEAR(p.per_chunk, 76e9 + experts128, 1e3);
  EXPECT_NEAR(p.per_chunk - 76e9, 1.30e12, 0.01e12);
  EXPECT_NEAR(p.per_prompt_token, (76e9 + experts128) / 128.0, 1.0);
  EXPECT_NEAR(p.per_prompt_token, 10.8e9, 0.05e9);
  // A generated token: the trunk and 16 experts in each of 92 layers.
  EXPECT_NEAR(p.per_generated_token, 76e9 + 92.0 * 16.0 * miss * kExpert, 1.0);
  // Issue 22: a chunk of 2,048 reads every expert once (1.45 TB) plus the trunk: ~0.74 GB per token.
  const ReadPrice big = PriceAt(r, 2048);
  EXPECT_NEAR(big.per_prompt_token, (76e9 + 92.0 * 896.0 * miss * kExpert) / 2048.0, 1.0);
  EXPECT_NEAR(big.per_prompt_token, 0.74e9, 0.01e9);
}

TEST(ReadPrice, AnExpertCacheHoldingEverythingLeavesTheTrunk) {
  const ReadModel r = Release(92 * 896, 5'000'000'000);
  EXPECT_EQ(PriceAt(r, 1).per_generated_token, 5e9);
  EXPECT_EQ(PriceAt(r, 512).per_chunk, 5e9);
  EXPECT_EQ(PriceAt(r, 512).per_prompt_token, 5e9 / 512.0);
  // Half the experts cached: half the misses.
  const ReadModel half = Release(92 * 448, 0);
  EXPECT_NEAR(PriceAt(half, 1).per_generated_token, 92.0 * 16.0 * 0.5 * kExpert, 1.0);
}

TEST(ReadPrice, APromptIsItsFullChunksThenTheRest) {
  const ReadModel r = Release(0, 1'000'000'000);
  auto pass = [](double tokens) { return 1e9 + 92.0 * 896.0 * (1.0 - std::pow(55.0 / 56.0, tokens)) * kExpert; };
  EXPECT_NEAR(PromptBytes(r, 128, 300), 2 * pass(128) + pass(44), 1e3);
  EXPECT_NEAR(PromptBytes(r, 128, 256), 2 * pass(128), 1e3);
  EXPECT_NEAR(PromptBytes(r, 4096, 100), pass(100), 1e3);  // shorter than the chunk: one pass
  EXPECT_EQ(PromptBytes(r, 128, 0), 0.0);
  // At 3.2 GB/s: seconds are bytes over the rate; the first token waits for the whole prompt.
  const TimePrice t = TimeAt(r, 128, 300, 3.2e9);
  EXPECT_NEAR(t.seconds_per_token, pass(1) / 3.2e9, 1e-9);
  EXPECT_NEAR(t.first_token_seconds, (2 * pass(128) + pass(44)) / 3.2e9, 1e-6);
  EXPECT_EQ(TimeAt(r, 128, 300, 0).first_token_seconds, 0.0);  // no rate, no seconds
}

TEST(ReadPrice, DiskRates) {
  EXPECT_DOUBLE_EQ(ParseDiskRate("3.2GB/s"), 3.2e9);
  EXPECT_DOUBLE_EQ(ParseDiskRate("800MB/s"), 8e8);
  EXPECT_DOUBLE_EQ(ParseDiskRate("1.5GiB/s"), 1.5 * 1073741824.0);
  EXPECT_DOUBLE_EQ(ParseDiskRate("2500000000"), 2.5e9);
  for (const char* bad : {"", "fast", "-1GB/s", "0", "3.2XB/s", "GB/s", "3.2 GB/h"}) {
    try {
      ParseDiskRate(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), kExitUsage) << bad;
      EXPECT_NE(std::string(e.what()).find("--disk-rate"), std::string::npos);
    }
  }
}

}  // namespace
}  // namespace k3::plan
