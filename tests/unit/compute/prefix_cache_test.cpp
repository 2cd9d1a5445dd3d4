// The prefix-snapshot cache alone (services/compute/prefix_cache.h): longest-prefix lookup that
// leaves an id to feed, least-recently-used eviction under a byte bound, exact byte counts,
// and a snapshot bigger than the bound is not kept. No checkpoint: states of a made-up model.
#include <gtest/gtest.h>

#include <vector>

#include "common/plan/memory_plan.h"
#include "prefix_cache.h"
#include "small_config.h"

namespace k3::compute {
namespace {

using fixtures::SmallConfig;

// A state that consumed n positions; `mark` tells snapshots apart.
SequenceState StateAfter(const ModelConfig& cfg, int64_t n, float mark) {
  SequenceState s;
  s.Reset(cfg);
  s.kda[0].S[0] = mark;
  MlaCache& m = s.mla[1];
  m.c.assign(static_cast<size_t>(n * cfg.kv_lora_rank), mark);
  m.kpe.assign(static_cast<size_t>(n * cfg.qk_rope_head_dim), mark);
  m.len = n;
  s.position = n;
  return s;
}

std::vector<int32_t> Ids(std::initializer_list<int32_t> v) { return v; }

TEST(PrefixCache, BytesAreWhatASnapshotHoldsAndMatchThePlan) {
  const ModelConfig cfg = SmallConfig();
  // Per KDA layer 2*4*4 state + 3 windows of 3*8 floats = 104; MLA 10 floats per position;
  // 1 int32 id per position: 5 positions -> 4 * (2*104 + 5*(10+1)) = 1052 bytes.
  EXPECT_EQ(PrefixCache::BytesOf(5, StateAfter(cfg, 5, 1)), 1052);
  EXPECT_EQ(plan::PrefixSnapshotBytes(cfg, 5), 1052);
  for (int64_t n : {1, 7, 100}) EXPECT_EQ(PrefixCache::BytesOf(static_cast<size_t>(n), StateAfter(cfg, n, 1)),
                                          plan::PrefixSnapshotBytes(cfg, n));
  PrefixCache cache(10000);
  ASSERT_TRUE(cache.Insert(Ids({1, 2, 3, 4, 5}), 0, StateAfter(cfg, 5, 1)));
  EXPECT_EQ(cache.bytes(), 1052);
}

TEST(PrefixCache, LookupFindsTheLongestPrefixThatLeavesAnIdToFeed) {
  const ModelConfig cfg = SmallConfig();
  PrefixCache cache(1 << 20);
  ASSERT_TRUE(cache.Insert(Ids({1, 2}), 0, StateAfter(cfg, 2, 2)));
  ASSERT_TRUE(cache.Insert(Ids({1, 2, 3, 4}), 0, StateAfter(cfg, 4, 4)));
  ASSERT_TRUE(cache.Insert(Ids({1, 2, 3, 4, 5}), 0, StateAfter(cfg, 5, 5)));
  ASSERT_TRUE(cache.Insert(Ids({1, 7, 3}), 0, StateAfter(cfg, 3, 7)));
  auto found = [&](std::vector<int32_t> ids) -> float {
    const PrefixSnapshot* s = cache.Lookup(ids, 0);
    if (!s) return -1;
    EXPECT_EQ(s->state.position, static_cast<int64_t>(s->ids.size()));
    return s->state.kda[0].S[0];
  };
  EXPECT_EQ(found({1, 2, 3, 4, 5, 6}), 5);  // the longest
  EXPECT_EQ(found({1, 2, 3, 4, 5}), 4);     // the whole prompt cached: one id is still fed
  EXPECT_EQ(found({1, 2, 3, 9}), 2);        // diverges after two
  EXPECT_EQ(found({1, 7, 3, 3}), 7);
  EXPECT_EQ(found({1, 2}), -1);             // [1,2] would leave nothing to feed
  EXPECT_EQ(found({2, 1, 3}), -1);
  EXPECT_EQ(found({}), -1);
  EXPECT_EQ(cache.size(), 4u);
}

TEST(PrefixCache, EvictsTheLeastRecentlyUsedToStayWithinTheBound) {
  const ModelConfig cfg = SmallConfig();
  const int64_t one = plan::PrefixSnapshotBytes(cfg, 3);
  PrefixCache cache(2 * one + 100);  // room for two
  ASSERT_TRUE(cache.Insert(Ids({1, 1, 1}), 0, StateAfter(cfg, 3, 1)));
  ASSERT_TRUE(cache.Insert(Ids({2, 2, 2}), 0, StateAfter(cfg, 3, 2)));
  ASSERT_NE(cache.Lookup(Ids({1, 1, 1, 9}), 0), nullptr);  // 1 is now the most recent
  ASSERT_TRUE(cache.Insert(Ids({3, 3, 3}), 0, StateAfter(cfg, 3, 3)));
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_EQ(cache.bytes(), 2 * one);
  EXPECT_EQ(cache.Lookup(Ids({2, 2, 2, 9}), 0), nullptr);  // evicted
  EXPECT_NE(cache.Lookup(Ids({1, 1, 1, 9}), 0), nullptr);
  EXPECT_NE(cache.Lookup(Ids({3, 3, 3, 9}), 0), nullptr);
  // Re-inserting held ids keeps one copy and makes it the most recent: 1 survives the next one.
  ASSERT_TRUE(cache.Insert(Ids({1, 1, 1}), 0, StateAfter(cfg, 3, 1)));
  EXPECT_EQ(cache.bytes(), 2 * one);
  ASSERT_TRUE(cache.Insert(Ids({4, 4, 4}), 0, StateAfter(cfg, 3, 4)));
  EXPECT_NE(cache.Lookup(Ids({1, 1, 1, 9}), 0), nullptr);
  EXPECT_EQ(cache.Lookup(Ids({3, 3, 3, 9}), 0), nullptr);
  EXPECT_EQ((std::vector<size_t>{3, 3}), cache.Lengths());
  EXPECT_LE(cache.bytes(), cache.capacity());
}

TEST(PrefixCache, ASnapshotBiggerThanTheBoundIsNotKeptAndEvictsNothing) {
  const ModelConfig cfg = SmallConfig();
  PrefixCache cache(plan::PrefixSnapshotBytes(cfg, 4));
  ASSERT_TRUE(cache.Insert(Ids({1}), 0, StateAfter(cfg, 1, 1)));
  EXPECT_FALSE(cache.Fits(plan::PrefixSnapshotBytes(cfg, 5)));
  EXPECT_FALSE(cache.Insert(Ids({1, 2, 3, 4, 5}), 0, StateAfter(cfg, 5, 5)));
  EXPECT_EQ(cache.size(), 1u);
  EXPECT_NE(cache.Lookup(Ids({1, 2}), 0), nullptr);
  // Exactly the bound fits (and evicts the other).
  EXPECT_TRUE(cache.Insert(Ids({1, 2, 3, 4}), 0, StateAfter(cfg, 4, 4)));
  EXPECT_EQ(cache.bytes(), cache.capacity());
  EXPECT_EQ(cache.size(), 1u);
  PrefixCache off(0);
  EXPECT_FALSE(off.Insert(Ids({1}), 0, StateAfter(cfg, 1, 1)));
  EXPECT_EQ(off.Lookup(Ids({1, 2}), 0), nullptr);
}

TEST(PrefixCache, RefusesAStateThatDidNotConsumeExactlyItsIds) {
  const ModelConfig cfg = SmallConfig();
  PrefixCache cache(1 << 20);
  EXPECT_FALSE(cache.Insert(Ids({1, 2, 3}), 0, StateAfter(cfg, 2, 1)));
  EXPECT_FALSE(cache.Insert(Ids({}), 0, StateAfter(cfg, 0, 1)));
  EXPECT_EQ(cache.size(), 0u);
}

// The held state is a copy: changing the offered one afterwards changes nothing.
TEST(PrefixCache, HoldsACopyOfTheState) {
  const ModelConfig cfg = SmallConfig();
  PrefixCache cache(1 << 20);
  SequenceState s = StateAfter(cfg, 3, 1);
  ASSERT_TRUE(cache.Insert(Ids({5, 6, 7}), 0, s));
  s.kda[0].S[0] = 99;
  s.mla[1].c[0] = 99;
  const PrefixSnapshot* got = cache.Lookup(Ids({5, 6, 7, 8}), 0);
  ASSERT_NE(got, nullptr);
  EXPECT_EQ(got->state.kda[0].S[0], 1);
  EXPECT_EQ(got->state.mla[1].c[0], 1);
}

// Generate.cache_partition (a server request's cache_salt): a snapshot is found only by
// sequences of its own partition, so one client cannot tell from cached_tokens (or the time to
// its first token) whether another partition's prompts began like its own.
TEST(PrefixCache, SnapshotsAreFoundOnlyInTheirOwnPartition) {
  const ModelConfig cfg = SmallConfig();
  PrefixCache cache(1 << 20);
  ASSERT_TRUE(cache.Insert(Ids({1, 2, 3}), 7, StateAfter(cfg, 3, 1)));
  EXPECT_EQ(cache.Lookup(Ids({1, 2, 3, 4}), 0), nullptr);  // the shared partition does not see it
  EXPECT_EQ(cache.Lookup(Ids({1, 2, 3, 4}), 8), nullptr);
  const PrefixSnapshot* own = cache.Lookup(Ids({1, 2, 3, 4}), 7);
  ASSERT_NE(own, nullptr);
  EXPECT_EQ(own->partition, 7u);
  // The same ids in another partition are a second snapshot, not the first made recent.
  ASSERT_TRUE(cache.Insert(Ids({1, 2, 3}), 0, StateAfter(cfg, 3, 2)));
  EXPECT_EQ(cache.size(), 2u);
  const PrefixSnapshot* shared = cache.Lookup(Ids({1, 2, 3, 4}), 0);
  ASSERT_NE(shared, nullptr);
  EXPECT_EQ(shared->partition, 0u);
}

}  // namespace
}  // namespace k3::compute
