// Speculative decoding on the tiny checkpoint: the n-gram drafter on hand-made sequences; a
// chunk through the model leaves bitwise the state of the same tokens fed one by one; a
// verify pass cut back to its first `keep` tokens equals feeding only those; and generation
// with drafts gives the ids, the logits that chose each id and the final state of generation
// without, through accepted and rejected drafts, stop ids inside a draft, the --gen limit and
// a stop between queued tokens. The rollback region of the plan is what compute holds.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <memory>
#include <vector>

#include "common/error.h"
#include "common/plan/memory_plan.h"
#include "forward.h"
#include "generate.h"
#include "speculate.h"
#include "tiny_checkpoint.h"

namespace k3::compute {
namespace {

TEST(DraftNgram, ProposesWhatFollowedTheLongestRecentSuffix) {
  EXPECT_TRUE(DraftNgram({1, 2, 3, 4}, 4).empty());  // nothing recurs
  EXPECT_TRUE(DraftNgram({5}, 4).empty());
  EXPECT_TRUE(DraftNgram({1, 2, 1, 2}, 0).empty());
  EXPECT_EQ(DraftNgram({1, 2, 3, 4, 1, 2}, 4), (std::vector<int32_t>{3, 4, 1, 2}));
  EXPECT_EQ(DraftNgram({1, 2, 3, 4, 1, 2}, 2), (std::vector<int32_t>{3, 4}));
  // "5 1 2" (length 3) occurred at 0 and wins over the more recent "1 2" (followed by 8).
  EXPECT_EQ(DraftNgram({5, 1, 2, 9, 7, 1, 2, 8, 5, 1, 2}, 3), (std::vector<int32_t>{9, 7, 1}));
  // Of two occurrences of the same suffix, the most recent: "3" followed by 6, not by 4.
  EXPECT_EQ(DraftNgram({3, 4, 0, 3, 6, 1, 3}, 1), (std::vector<int32_t>{6}));
  // A pattern shorter than the draft continues through the draft itself.
  EXPECT_EQ(DraftNgram({7, 7, 7}, 5), (std::vector<int32_t>{7, 7, 7, 7, 7}));
  EXPECT_EQ(DraftNgram({9, 1, 2, 1, 2}, 5), (std::vector<int32_t>{1, 2, 1, 2, 1}));
  // Suffixes longer than max_ngram are not looked for: "4 5 6 7 8" once more, but only "5 6 7 8"
  // (length 4) is matched, at its most recent occurrence (followed by 1).
  EXPECT_EQ(DraftNgram({4, 5, 6, 7, 8, 0, 9, 5, 6, 7, 8, 1, 4, 5, 6, 7, 8}, 1), (std::vector<int32_t>{1}));
}

bool SameFloats(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * 4) == 0);
}

// Every byte of the carried state: KDA S and conv windows, MLA rows and lengths, position.
void ExpectSameState(const SequenceState& a, const SequenceState& b) {
  ASSERT_EQ(a.position, b.position);
  ASSERT_EQ(a.kda.size(), b.kda.size());
  for (size_t l = 0; l < a.kda.size(); ++l) {
    EXPECT_TRUE(SameFloats(a.kda[l].S, b.kda[l].S)) << "KDA S, layer " << l;
    EXPECT_TRUE(SameFloats(a.kda[l].conv_q, b.kda[l].conv_q)) << "conv q, layer " << l;
    EXPECT_TRUE(SameFloats(a.kda[l].conv_k, b.kda[l].conv_k)) << "conv k, layer " << l;
    EXPECT_TRUE(SameFloats(a.kda[l].conv_v, b.kda[l].conv_v)) << "conv v, layer " << l;
    EXPECT_EQ(a.mla[l].len, b.mla[l].len) << "MLA length, layer " << l;
    EXPECT_TRUE(SameFloats(a.mla[l].c, b.mla[l].c)) << "MLA latent, layer " << l;
    EXPECT_TRUE(SameFloats(a.mla[l].kpe, b.mla[l].kpe)) << "MLA k_pe, layer " << l;
  }
}

class Speculative : public TinyCheckpoint {
 protected:
  std::unique_ptr<Forward> Fresh() { return std::make_unique<Forward>(cfg_, globals_, *layers_, *experts_); }

  std::vector<int32_t> Prompt() const {
    std::vector<int32_t> ids;
    for (int i = 0; i < 10; ++i) ids.push_back(static_cast<int32_t>((i * 53 + 11) % cfg_.vocab_size));
    return ids;
  }

  std::vector<float> Step(Forward& f, int32_t id) {
    std::vector<float> l(static_cast<size_t>(cfg_.vocab_size));
    f.Run(&id, 1, false, l.data(), nullptr);
    return l;
  }

  // A run's ids, the logits that chose each emitted id (by position) and the final state.
  struct Outcome {
    GreedyResult r;
    std::map<size_t, std::vector<float>> logits;
    SequenceState state;
  };

  Outcome Generate(GreedyParams p, const TokenChooser& base, const GreedyHooks& h = {}) {
    auto f = Fresh();
    Outcome o;
    std::map<size_t, std::vector<float>> seen;  // every call, emitted or not
    p.choose = [&](const float* l, const std::vector<int32_t>& seq) {
      seen[seq.size()].assign(l, l + cfg_.vocab_size);
      return base(l, seq);
    };
    o.r = RunGreedy(*f, cfg_.vocab_size, p, h);
    for (size_t i = 0; i < o.r.generated.size(); ++i) {
      const size_t pos = p.ids.size() + i;
      o.logits[pos] = seen.at(pos);
    }
    o.state = f->state();
    return o;
  }

  void ExpectSameRun(const Outcome& a, const Outcome& b) {
    EXPECT_EQ(a.r.generated, b.r.generated);
    EXPECT_EQ(a.r.ending, b.r.ending);
    ASSERT_EQ(a.logits.size(), b.logits.size());
    for (const auto& [pos, l] : a.logits) EXPECT_TRUE(SameFloats(l, b.logits.at(pos))) << "logits at " << pos;
    ExpectSameState(a.state, b.state);
  }

  int32_t Argmax(const float* l) const { return compute::Argmax(l, cfg_.vocab_size); }
};

// The promise chunked prefill rests on, checked on the state itself: T tokens in one chunk
// leave bitwise the KDA, conv and MLA state of the same tokens one at a time.
TEST_F(Speculative, ChunkLeavesTheStateOfSingleSteps) {
  const auto ids = Prompt();
  auto chunked = Fresh(), single = Fresh();
  chunked->Run(ids.data(), 4, false, nullptr, nullptr);
  chunked->Run(ids.data() + 4, 6, false, nullptr, nullptr);
  for (int32_t id : ids) single->Run(&id, 1, false, nullptr, nullptr);
  ExpectSameState(chunked->state(), single->state());
}

// A verify pass cut back to its first `keep` tokens is the state of feeding only those, and
// the next step's logits agree bit for bit.
TEST_F(Speculative, KeepFirstEqualsFeedingOnlyTheKeptTokens) {
  const auto ids = Prompt();
  const std::vector<int32_t> pass = {ids[3], ids[1], 4, 9, ids[3]};
  const int64_t T = static_cast<int64_t>(pass.size());
  for (int64_t keep = 0; keep <= T; ++keep) {
    SCOPED_TRACE("keep " + std::to_string(keep));
    auto spec = Fresh(), ref = Fresh();
    spec->Run(ids.data(), static_cast<int64_t>(ids.size()), false, nullptr, nullptr);
    ref->Run(ids.data(), static_cast<int64_t>(ids.size()), false, nullptr, nullptr);
    std::vector<float> all(static_cast<size_t>(T * cfg_.vocab_size));
    spec->BeginVerify();
    spec->Run(pass.data(), T, true, all.data(), nullptr);
    spec->KeepFirst(keep);
    EXPECT_FALSE(spec->verifying());
    for (int64_t t = 0; t < keep; ++t) ref->Run(&pass[static_cast<size_t>(t)], 1, false, nullptr, nullptr);
    ExpectSameState(spec->state(), ref->state());
    EXPECT_TRUE(SameFloats(Step(*spec, 77), Step(*ref, 77)));
    ExpectSameState(spec->state(), ref->state());
  }
}

// A stop inside the verify pass (between layers) leaves some layers advanced: KeepFirst(0)
// returns every one of them to the state before the pass (nothing of it can be kept).
TEST_F(Speculative, AStopInsideTheVerifyPassLeavesTheStateBeforeIt) {
  const auto ids = Prompt();
  auto spec = Fresh(), ref = Fresh();
  spec->Run(ids.data(), 6, false, nullptr, nullptr);
  ref->Run(ids.data(), 6, false, nullptr, nullptr);
  int layers = 0;
  spec->SetStopCheck([&] { return ++layers == cfg_.num_layers - 2; });
  spec->BeginVerify();
  EXPECT_THROW(spec->Run(ids.data() + 6, 4, true, nullptr, nullptr), StopAtSafePoint);
  spec->SetStopCheck({});
  EXPECT_THROW(spec->KeepFirst(1), Error);
  spec->KeepFirst(0);
  ExpectSameState(spec->state(), ref->state());
  EXPECT_TRUE(SameFloats(Step(*spec, ids[6]), Step(*ref, ids[6])));
}

// Greedy on the tiny model, with and without drafts: the same ids, logits and final state.
TEST_F(Speculative, GreedyWithDraftsEqualsGreedy) {
  GreedyParams p;
  p.ids = Prompt();
  p.ids.insert(p.ids.end(), p.ids.begin(), p.ids.end());
  p.gen = 24;  // long enough for generated ids to recur (drafts; the random model rejects them)
  const TokenChooser greedy = [&](const float* l, const std::vector<int32_t>&) { return Argmax(l); };
  const Outcome base = Generate(p, greedy);
  for (int64_t n : {1, 4, 16}) {
    SCOPED_TRACE("spec " + std::to_string(n));
    p.spec = n;
    const Outcome o = Generate(p, greedy);
    ExpectSameRun(base, o);
    EXPECT_GT(o.r.spec_drafted, 0);
    EXPECT_EQ(o.r.token_seconds.size(), o.r.generated.size() - 1);
  }
}

// A pure chooser that mostly repeats the sequence with period 3 (so the n-gram drafts are
// accepted) and every 4th position takes the model's argmax (so drafts are rejected there,
// and the ids depend on the state being right after each rollback).
TokenChooser Periodic(int64_t V) {
  return [V](const float* l, const std::vector<int32_t>& seq) {
    return seq.size() % 4 == 0 ? Argmax(l, V) : seq[seq.size() - 3];
  };
}

TEST_F(Speculative, AcceptedAndRejectedDraftsGiveTheSameRun) {
  GreedyParams p;
  p.ids = Prompt();
  p.gen = 23;
  const Outcome base = Generate(p, Periodic(cfg_.vocab_size));
  for (int64_t n : {1, 2, 4, 7}) {
    SCOPED_TRACE("spec " + std::to_string(n));
    p.spec = n;
    const Outcome o = Generate(p, Periodic(cfg_.vocab_size));
    ExpectSameRun(base, o);
    EXPECT_GT(o.r.spec_accepted, 0);
    EXPECT_LT(o.r.spec_accepted, o.r.spec_drafted);  // some rejected
  }
}

// Stop ids inside a draft: generation ends at the first one, exactly as without drafts, and
// the state keeps only what was emitted (all but the last id fed).
TEST_F(Speculative, StopIdInsideADraftEndsThere) {
  GreedyParams p;
  p.ids = Prompt();
  p.gen = 30;
  const Outcome free_run = Generate(p, Periodic(cfg_.vocab_size));
  for (size_t at : {size_t{5}, size_t{9}, size_t{14}}) {
    p.spec = 0;
    p.stop_ids = {free_run.r.generated[at]};
    const Outcome base = Generate(p, Periodic(cfg_.vocab_size));
    EXPECT_EQ(base.r.ending, Ending::kStopId);
    for (int64_t n : {3, 8}) {
      SCOPED_TRACE("stop at " + std::to_string(at) + ", spec " + std::to_string(n));
      p.spec = n;
      ExpectSameRun(base, Generate(p, Periodic(cfg_.vocab_size)));
    }
  }
}

// --gen limits: drafts never run past the last allowed token, whatever the limit.
TEST_F(Speculative, GenLimitHoldsExactly) {
  GreedyParams p;
  p.ids = Prompt();
  for (int64_t gen : {0, 1, 2, 3, 6, 11}) {
    p.gen = gen;
    p.spec = 0;
    const Outcome base = Generate(p, Periodic(cfg_.vocab_size));
    p.spec = 5;
    SCOPED_TRACE("gen " + std::to_string(gen));
    const Outcome o = Generate(p, Periodic(cfg_.vocab_size));
    ASSERT_EQ(o.r.generated.size(), static_cast<size_t>(gen));
    ExpectSameRun(base, o);
  }
}

// A stop asked between tokens while verified tokens are still queued ends there, with the
// state of the one-token loop stopped at the same point.
TEST_F(Speculative, StopBetweenQueuedTokensKeepsThePrefixAndItsState) {
  GreedyParams p;
  p.ids = Prompt();
  p.gen = 20;
  for (int ask : {2, 3, 7}) {
    int asked = 0;
    GreedyHooks h;
    h.should_stop = [&] { return ++asked == ask; };
    const Outcome base = Generate(p, Periodic(cfg_.vocab_size), h);
    GreedyParams q = p;
    q.spec = 4;
    asked = 0;
    SCOPED_TRACE("stop at ask " + std::to_string(ask));
    const Outcome o = Generate(q, Periodic(cfg_.vocab_size), h);
    EXPECT_EQ(o.r.ending, Ending::kInterrupted);
    ExpectSameRun(base, o);
  }
}

// The plan's spec-rollback region is exactly what a verify pass of N drafts holds (the
// journal plus the pass's logits rows), present only with --spec, and raises the floor by its
// size when the prompt chunk already covers N+1 positions.
TEST_F(Speculative, RollbackRegionIsWhatComputeHolds) {
  const auto ids = Prompt();
  for (int64_t n : {1, 4, 16}) {
    auto f = Fresh();
    f->Run(ids.data(), 3, false, nullptr, nullptr);
    std::vector<float> all(static_cast<size_t>((n + 1) * cfg_.vocab_size));
    std::vector<int32_t> pass(static_cast<size_t>(n + 1), ids[5]);
    f->BeginVerify();
    f->Run(pass.data(), n + 1, true, all.data(), nullptr);
    EXPECT_EQ(f->journal_bytes() + static_cast<int64_t>(all.size()) * 4, plan::SpecRollbackBytes(cfg_, n));
    f->KeepFirst(1);
  }
  EXPECT_EQ(plan::SpecRollbackBytes(cfg_, 0), 0);
  const plan::PlanModel m = plan::PlanModelFromConfig(cfg_);
  plan::PlanOptions o;
  const int64_t floor0 = plan::PlanFloor(m, o);
  o.spec_drafts = 4;
  EXPECT_EQ(plan::PlanFloor(m, o) - floor0, plan::SpecRollbackBytes(cfg_, 4));
  const plan::MemoryPlan with = plan::MakePlan(m, plan::PlanFloor(m, o) + (64 << 20), o);
  o.spec_drafts = 0;
  const plan::MemoryPlan without = plan::MakePlan(m, plan::PlanFloor(m, o) + (64 << 20), o);
  auto has_region = [](const plan::MemoryPlan& p) {
    for (const plan::Region& r : p.regions())
      if (r.region == "spec-rollback") return r.bytes;
    return int64_t{-1};
  };
  EXPECT_EQ(has_region(with), plan::SpecRollbackBytes(cfg_, 4));
  EXPECT_EQ(has_region(without), -1);
  o.spec_drafts = plan::kMaxSpecDrafts + 1;
  EXPECT_THROW(plan::PlanFloor(m, o), Error);
}

}  // namespace
}  // namespace k3::compute
