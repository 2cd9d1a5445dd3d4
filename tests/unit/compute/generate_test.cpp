// RunGreedy's endings on the tiny checkpoint: stop ids end the generation right after the
// stop token, a stop check (between tokens or between layers) ends it early, and in every case
// the ids produced are exactly the prefix of the uninterrupted run.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "forward.h"
#include "generate.h"
#include "mmap_source.h"
#include "tiny_checkpoint.h"

namespace k3::compute {
namespace {

class Greedy : public TinyCheckpoint {
 protected:
  void SetUp() override {
    TinyCheckpoint::SetUp();
    if (HasFatalFailure()) return;
    fwd_ = std::make_unique<Forward>(cfg_, globals_, *layers_, *experts_);
    params_.ids = {1, 5, 9, 200, 77, 3, 18, 42};
    params_.gen = 12;
  }

  GreedyResult Run(const GreedyParams& p, const GreedyHooks& h = {}) {
    fwd_->Reset();
    return RunGreedy(*fwd_, cfg_.vocab_size, p, h);
  }

  std::unique_ptr<Forward> fwd_;
  GreedyParams params_;
};

TEST_F(Greedy, StopIdEndsRightAfterItsFirstOccurrence) {
  const GreedyResult full = Run(params_);
  ASSERT_EQ(full.generated.size(), 12u);
  EXPECT_EQ(full.ending, Ending::kLength);
  // Stop on the 4th token's id: generation ends at its first occurrence (which may be earlier).
  GreedyParams p = params_;
  p.stop_ids = {999999, full.generated[3]};
  size_t first = 0;
  while (full.generated[first] != full.generated[3]) ++first;
  const GreedyResult r = Run(p);
  EXPECT_EQ(r.ending, Ending::kStopId);
  ASSERT_EQ(r.generated.size(), first + 1);
  EXPECT_TRUE(std::equal(r.generated.begin(), r.generated.end(), full.generated.begin()));
  EXPECT_EQ(r.token_seconds.size(), first);
}

TEST_F(Greedy, MaxPositionsCapsPromptPlusGenerated) {
  const GreedyResult full = Run(params_);
  GreedyParams p = params_;
  p.max_positions = 13;  // 8 prompt ids + 5
  const GreedyResult r = Run(p);
  EXPECT_EQ(r.ending, Ending::kLength);
  ASSERT_EQ(r.generated.size(), 5u);
  EXPECT_TRUE(std::equal(r.generated.begin(), r.generated.end(), full.generated.begin()));
  p.max_positions = 8;  // the prompt fills it: the prompt pass, no token
  const GreedyResult none = Run(p);
  EXPECT_TRUE(none.prefill_done);
  EXPECT_TRUE(none.generated.empty());
  EXPECT_EQ(none.ending, Ending::kLength);
  p.max_positions = 100;  // more room than gen: gen decides
  EXPECT_EQ(Run(p).generated.size(), 12u);
}

// The MLA caches take the whole context up front (the plan's mla-cache region exactly) and
// never move while the sequence grows: a reallocation would hold two copies at once.
TEST_F(Greedy, MlaCacheReservedAtTheContextNeverMoves) {
  GreedyParams p = params_;
  p.max_positions = 40;
  std::vector<size_t> mla_layers;
  for (size_t l = 0; l < cfg_.layer_kind.size(); ++l)
    if (cfg_.layer_kind[l] == MixerKind::MLA) mla_layers.push_back(l);
  ASSERT_FALSE(mla_layers.empty());
  std::vector<const float*> first;
  int moved = 0;
  GreedyHooks h;
  h.on_token = [&](int32_t, int64_t) {
    const auto& mla = fwd_->state().mla;
    if (first.empty())
      for (size_t l : mla_layers) first.push_back(mla[l].c.data());
    for (size_t i = 0; i < mla_layers.size(); ++i) moved += mla[mla_layers[i]].c.data() != first[i];
  };
  const GreedyResult r = Run(p, h);
  ASSERT_EQ(r.generated.size(), 12u);
  EXPECT_EQ(moved, 0);
  for (size_t l : mla_layers) {
    const auto& m = fwd_->state().mla[l];
    EXPECT_EQ(m.len, fwd_->position());
    EXPECT_EQ(m.c.capacity(), static_cast<size_t>(40 * cfg_.kv_lora_rank)) << "layer " << l;
    EXPECT_EQ(m.kpe.capacity(), static_cast<size_t>(40 * cfg_.qk_rope_head_dim)) << "layer " << l;
  }
  // The ids do not depend on it.
  EXPECT_EQ(r.generated, Run(params_).generated);
}

TEST_F(Greedy, CancelBetweenTokensKeepsThePrefix) {
  const GreedyResult full = Run(params_);
  GreedyHooks h;
  int asked = 0;
  h.cancelled = [&] { return ++asked == 3; };
  const GreedyResult r = Run(params_, h);
  EXPECT_EQ(r.ending, Ending::kCancelled);
  ASSERT_EQ(r.generated.size(), 3u);
  EXPECT_TRUE(std::equal(r.generated.begin(), r.generated.end(), full.generated.begin()));
}

// A Cancel between two prompt chunks ends the request there: the ids fed so far stay in the
// sequence (the forward state holds exactly them), the rest of the prompt is dropped.
TEST_F(Greedy, CancelBetweenPromptChunksKeepsWhatWasFed) {
  GreedyParams p = params_;
  p.prefill_chunk = 3;  // 8 prompt ids: chunks of 3, 3, 2, asked after the first two
  GreedyHooks h;
  int asked = 0;
  h.cancelled = [&] { return ++asked == 2; };
  const GreedyResult r = Run(p, h);
  EXPECT_EQ(r.ending, Ending::kCancelled);
  EXPECT_FALSE(r.prefill_done);
  EXPECT_TRUE(r.generated.empty());
  EXPECT_EQ(r.full, std::vector<int32_t>(params_.ids.begin(), params_.ids.begin() + 6));
  EXPECT_EQ(fwd_->position(), 6);
}

TEST_F(Greedy, StopBetweenTokensKeepsThePrefix) {
  const GreedyResult full = Run(params_);
  GreedyHooks h;
  int asked = 0;
  h.should_stop = [&] { return ++asked == 5; };  // asked once after each token
  const GreedyResult r = Run(params_, h);
  EXPECT_EQ(r.ending, Ending::kInterrupted);
  ASSERT_EQ(r.generated.size(), 5u);
  EXPECT_TRUE(std::equal(r.generated.begin(), r.generated.end(), full.generated.begin()));
}

TEST_F(Greedy, StopBetweenLayersEndsTheStepAndKeepsThePrefix) {
  const GreedyResult full = Run(params_);
  // Layers per token = num_layers; stop inside the 3rd decode step (after the prompt pass).
  int64_t layers_done = 0;
  const int64_t stop_at = cfg_.num_layers /*prompt*/ + 2 * cfg_.num_layers + 2;
  fwd_->SetStopCheck([&] { return ++layers_done == stop_at; });
  const GreedyResult r = Run(params_);
  fwd_->SetStopCheck({});
  EXPECT_EQ(r.ending, Ending::kInterrupted);
  EXPECT_TRUE(r.prefill_done);
  ASSERT_EQ(r.generated.size(), 3u);  // token 0 from the prompt, tokens 1 and 2 from two steps
  EXPECT_EQ(r.token_seconds.size(), 2u);
  EXPECT_TRUE(std::equal(r.generated.begin(), r.generated.end(), full.generated.begin()));
  // The same Forward still gives the full run's ids afterwards (Reset makes a fresh sequence).
  EXPECT_EQ(Run(params_).generated, full.generated);
}

TEST_F(Greedy, StopDuringThePromptPassGeneratesNothing) {
  fwd_->SetStopCheck([] { return true; });
  const GreedyResult r = Run(params_);
  fwd_->SetStopCheck({});
  EXPECT_EQ(r.ending, Ending::kInterrupted);
  EXPECT_FALSE(r.prefill_done);
  EXPECT_TRUE(r.generated.empty());
}

}  // namespace
}  // namespace k3::compute
