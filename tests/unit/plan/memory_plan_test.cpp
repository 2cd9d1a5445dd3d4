// Memory plan invariants on a synthetic model, and the plan of the real release at 8G, 32G
// and 128G from its config.json + index (no shards needed).
#include "common/plan/memory_plan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <numeric>
#include <optional>

#include "common/error.h"
#include "common/safetensors.h"
#include "common/tensor_names.h"
#include "tests/unit/plan/synthetic_model.h"

namespace k3::plan {
namespace {

using synthetic::kGiB;
using synthetic::kMiB;
using synthetic::Widened;

PlanModel Synthetic() { return synthetic::SyntheticPlanModel(); }

// The invariants below hold at one prefill chunk: a cap of kFloorChunk fixes it there.
// PrefillChunk* tests cover the chunk the plan chooses.
PlanOptions SmallOptions() {
  PlanOptions o;
  o.prefill_chunk = kFloorChunk;
  o.tokenizer_bytes = kMiB;
  o.process_overhead = kMiB;
  o.lm_head_window = 4 * kMiB;
  o.embed_window = kMiB;
  return o;
}

// Checks that hold for every plan, computed from the inputs rather than from the planner.
void CheckInvariants(const PlanModel& m, const MemoryPlan& p, const PlanOptions& o = {}) {
  SCOPED_TRACE("budget " + std::to_string(p.budget));
  int64_t sum = 0;
  for (const auto& r : p.regions()) {
    EXPECT_GE(r.bytes, 0) << r.region;
    sum += r.bytes;
  }
  EXPECT_EQ(sum, p.total);
  EXPECT_LE(p.total, p.budget);
  EXPECT_GE(p.expert_slots, m.cfg.top_k);
  EXPECT_GE(p.expert_slot_bytes, m.expert_bytes);
  // Ring: at least 2 slots, each big enough for the largest unpinned layer once widened.
  int64_t largest_unpinned = 0, smallest_pinned = INT64_MAX;
  int64_t pinned_widened = 0;
  for (int l = 0; l < m.cfg.num_layers; ++l) {
    const bool pinned = std::count(p.pinned_layers.begin(), p.pinned_layers.end(), l) > 0;
    if (pinned) {
      smallest_pinned = std::min(smallest_pinned, m.trunk_bytes[l]);
      pinned_widened += Widened(m.trunk_bytes[l]);
    } else {
      largest_unpinned = std::max(largest_unpinned, m.trunk_bytes[l]);
    }
  }
  if (largest_unpinned > 0) {
    EXPECT_GE(p.ring_slots, 2);
    // Whole-layer slots hold the largest unpinned layer; with trunk pieces a slot is at least
    // the piece size (or the whole layer, if that is smaller), and layers larger than a slot
    // stream in pieces with read-ahead slots: 1 + read_ahead / slot.
    if (o.trunk_piece == kTrunkPieceLayer) {
      EXPECT_GE(p.ring_slot_bytes, Widened(largest_unpinned));
    } else {
      EXPECT_GE(p.ring_slot_bytes, std::min(Widened(largest_unpinned), o.trunk_piece));
    }
    EXPECT_EQ(p.trunk_pieced, p.ring_slot_bytes < Widened(largest_unpinned));
    if (p.trunk_pieced && o.ring_slots == 0) {
      const int64_t ahead = std::min(o.read_ahead, Widened(largest_unpinned));
      EXPECT_GE(p.ring_slots, 1 + (ahead + p.ring_slot_bytes - 1) / p.ring_slot_bytes);
    }
    EXPECT_GE(p.ring_bytes, p.ring_slots * p.ring_slot_bytes);
    // Largest first: nothing pinned is smaller than something left unpinned.
    if (!p.pinned_layers.empty()) {
      EXPECT_GE(smallest_pinned, largest_unpinned);
    }
  }
  EXPECT_GE(p.pinned_bytes, pinned_widened);
  // Trunk before experts: expert slots beyond top_k never hold as much as pinning the next
  // candidate would have cost (its widened run plus possibly a header page).
  const int64_t extra_expert = p.expert_arena_bytes - (p.expert_arena_bytes / p.expert_slot_bytes >= m.cfg.top_k
                                                           ? p.expert_slot_bytes * m.cfg.top_k : 0);
  int64_t next_cost = largest_unpinned ? Widened(largest_unpinned) + 4096 : 0;
  if (!p.lm_head_resident) next_cost = std::max(next_cost, m.lm_head_bytes);
  if (next_cost > 0 && p.expert_slots > m.cfg.top_k) {
    EXPECT_LT(extra_expert, next_cost + 2 * 4096);
  }
}

TEST(MemoryPlan, NeverExceedsBudgetAndKeepsInvariants) {
  const PlanModel m = Synthetic();
  const PlanOptions o = SmallOptions();
  const int64_t floor = PlanFloor(m, o);
  for (int64_t b = floor; b < floor + 600 * kMiB; b += 7 * kMiB + 12345) CheckInvariants(m, MakePlan(m, b, o));
}

// A run with a tokenizer has five processes (launcher, compute, trunk reader, expert fetcher,
// tokenizer), each with its overhead share; the tokenizer's tables come on top of its share.
TEST(MemoryPlan, OverheadCountsEveryProcessOfARun) {
  const PlanModel m = Synthetic();
  PlanOptions o = SmallOptions();
  o.process_overhead = 3 * kMiB;
  o.tokenizer_bytes = 7 * kMiB;
  const MemoryPlan p = MakePlan(m, PlanFloor(m, o), o);
  int found = 0;
  for (const auto& r : p.regions()) {
    if (r.region == "process-overhead") {
      EXPECT_EQ(r.bytes, 5 * 3 * kMiB);
      EXPECT_EQ(r.note, "5 processes");
      ++found;
    }
    if (r.region == "tables") {
      EXPECT_EQ(r.bytes, 7 * kMiB);
      ++found;
    }
  }
  EXPECT_EQ(found, 2);
  // One more MiB per process raises the floor by five.
  PlanOptions more = o;
  more.process_overhead += kMiB;
  EXPECT_EQ(PlanFloor(m, more) - PlanFloor(m, o), 5 * kMiB);
}

TEST(MemoryPlan, BelowFloorRefusedWithTheFloorInTheMessage) {
  const PlanModel m = Synthetic();
  const PlanOptions o = SmallOptions();
  const int64_t floor = PlanFloor(m, o);
  EXPECT_NO_THROW(MakePlan(m, floor, o));
  try {
    MakePlan(m, floor - 1, o);
    FAIL() << "budget below floor accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), kExitBudget);
    EXPECT_NE(std::string(e.what()).find(std::to_string(floor)), std::string::npos) << e.what();
  }
  // With whole-layer slots the floor covers a ring of two largest layers and top_k experts.
  PlanOptions whole = o;
  whole.trunk_piece = kTrunkPieceLayer;
  EXPECT_GE(PlanFloor(m, whole), 2 * Widened(90 * kMiB) + 4 * (3 * kMiB + 4096));
}

// docs/trunk-pieces.md §5: slots smaller than a layer lower the floor to N x slot + the rest;
// the floor then rises with the largest atomic piece (not the largest layer); extra budget
// pins as before; ring_slots overrides the count.
TEST(MemoryPlan, TrunkPiecesSizeTheRing) {
  const PlanModel m = Synthetic();
  PlanOptions whole = SmallOptions();
  whole.trunk_piece = kTrunkPieceLayer;
  PlanOptions o = SmallOptions();
  o.trunk_piece = 16 * kMiB;
  o.read_ahead = 32 * kMiB;
  const int64_t floor_whole = PlanFloor(m, whole), floor = PlanFloor(m, o);
  const MemoryPlan at_floor = MakePlan(m, floor, o);
  EXPECT_TRUE(at_floor.trunk_pieced);
  EXPECT_EQ(at_floor.ring_slot_bytes, 16 * kMiB);
  EXPECT_EQ(at_floor.ring_slots, 3);  // one computing + 32 MiB read ahead
  EXPECT_NE(at_floor.Table().find("layers in pieces"), std::string::npos) << at_floor.Table();
  // Three 16 MiB slots, nothing pinned, where whole-layer slots need 2 x 41 MiB with the
  // 90 MiB layer pinned (the cheapest floor then).
  EXPECT_TRUE(at_floor.pinned_layers.empty());
  EXPECT_LT(floor, floor_whole - 100 * kMiB);
  for (int64_t b = floor; b < floor + 600 * kMiB; b += 7 * kMiB + 12345) CheckInvariants(m, MakePlan(m, b, o), o);
  // A piece never goes below the layers' smallest slot: an atomic tensor of 40 MiB raises it.
  PlanModel atomic = m;
  atomic.min_piece_slot.assign(m.trunk_bytes.size(), 4096);
  atomic.min_piece_slot[0] = 40 * kMiB;
  const MemoryPlan a = MakePlan(atomic, PlanFloor(atomic, o), o);
  EXPECT_TRUE(a.pinned_layers.empty());
  EXPECT_EQ(a.ring_slot_bytes, 40 * kMiB);
  EXPECT_GT(PlanFloor(atomic, o), floor);
  // ... but never above the layer itself: a 25 MiB layer streams through a 25 MiB slot.
  atomic.min_piece_slot[0] = 4096;
  atomic.min_piece_slot[3] = 40 * kMiB;
  EXPECT_EQ(LayerMinPieceSlot(atomic, 3), Widened(25 * kMiB));
  // A slot at least the largest layer is a whole-layer ring: 2 slots, no pieces.
  PlanOptions big = o;
  big.trunk_piece = 1024 * kMiB;
  const MemoryPlan b = MakePlan(m, PlanFloor(m, big), big);
  EXPECT_FALSE(b.trunk_pieced);
  EXPECT_EQ(b.ring_slots, 2);
  int64_t largest_unpinned = 0;
  for (int l = 0; l < m.cfg.num_layers; ++l)
    if (std::count(b.pinned_layers.begin(), b.pinned_layers.end(), l) == 0)
      largest_unpinned = std::max(largest_unpinned, m.trunk_bytes[static_cast<size_t>(l)]);
  EXPECT_EQ(b.ring_slot_bytes, Widened(largest_unpinned));
  // ring_slots (TOML) overrides the count.
  PlanOptions two = o;
  two.ring_slots = 2;
  EXPECT_EQ(MakePlan(m, PlanFloor(m, two), two).ring_slots, 2);
  EXPECT_LT(PlanFloor(m, two), floor);
}

TEST(ParseTrunkPiece, LayerSizesAndErrors) {
  EXPECT_EQ(ParseTrunkPiece("layer"), kTrunkPieceLayer);
  EXPECT_EQ(ParseTrunkPiece("64M"), 64 * kMiB);
  EXPECT_EQ(ParseTrunkPiece("4096"), 4096);
  for (const char* bad : {"", "auto", "100", "layers", "-64M", "64Q"}) {
    try {
      ParseTrunkPiece(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), kExitUsage) << bad;
    }
  }
}

TEST(MemoryPlan, FloorIsMonotone) {
  PlanModel m = Synthetic();
  PlanOptions o = SmallOptions();
  int64_t prev = 0;
  for (int64_t ctx : {1, 128, 4096, 65536, 1 << 20}) {
    o.context = ctx;
    const int64_t f = PlanFloor(m, o);
    EXPECT_GE(f, prev) << "context " << ctx;
    prev = f;
  }
  o = SmallOptions();
  const int64_t base = PlanFloor(m, o);
  m.expert_bytes *= 2;
  EXPECT_GT(PlanFloor(m, o), base);
  m = Synthetic();
  PlanOptions whole = o;
  whole.trunk_piece = kTrunkPieceLayer;
  const int64_t base_whole = PlanFloor(m, whole);
  m.trunk_bytes[0] *= 2;  // whole-layer slots: the largest layer sets the ring slot size
  EXPECT_GT(PlanFloor(m, whole), base_whole);
  m = Synthetic();
  m.cfg.top_k = 8;
  EXPECT_GT(PlanFloor(m, o), base);
}

TEST(MemoryPlan, MoreBudgetPinsMoreThenGrowsExperts) {
  const PlanModel m = Synthetic();
  const PlanOptions o = SmallOptions();
  const int64_t floor = PlanFloor(m, o);
  size_t prev_pinned = 0;
  int64_t prev_slots = 0;
  bool all_pinned_seen = false;
  for (int64_t b = floor; b < floor + 900 * kMiB; b += 3 * kMiB) {
    const MemoryPlan p = MakePlan(m, b, o);
    EXPECT_GE(p.pinned_layers.size(), prev_pinned) << "budget " << b;
    const bool all = p.pinned_layers.size() == m.trunk_bytes.size() && p.lm_head_resident;
    if (all && all_pinned_seen) {
      EXPECT_GE(p.expert_slots, prev_slots) << "budget " << b;
    }
    all_pinned_seen = all_pinned_seen || all;
    prev_pinned = p.pinned_layers.size();
    prev_slots = p.expert_slots;
  }
  EXPECT_TRUE(all_pinned_seen);
  const MemoryPlan big = MakePlan(m, 4 * kGiB, o);
  // Everything pinned: the ring still exists (the launcher always creates it) at its minimum.
  EXPECT_EQ(big.ring_slots, 2);
  EXPECT_EQ(big.ring_slot_bytes, 4096);
  EXPECT_TRUE(big.embed_resident);
  EXPECT_EQ(big.embed_window_bytes, 0);
  EXPECT_EQ(big.expert_slots, 7 * 16);  // capped at every expert of every MoE layer
}

// What is streamed must still fit the arenas the plan sizes: lm_head chunks in a ring slot
// (read widened), embedding rows in the embed window; and the shared-memory regions add up
// to exactly the arenas (computed here from the model, not from the planner).
TEST(MemoryPlan, StreamedHeadAndEmbeddingFitTheirArenas) {
  const PlanModel m = Synthetic();
  const PlanOptions o = SmallOptions();
  const int64_t V = m.cfg.vocab_size;
  const int64_t lm_row = (m.lm_head_bytes + V - 1) / V, embed_row = (m.embed_bytes + V - 1) / V;
  bool saw_streamed_head = false, saw_streamed_embed = false;
  for (int64_t b = PlanFloor(m, o); b < 2 * kGiB; b += 5 * kMiB + 777) {
    const MemoryPlan p = MakePlan(m, b, o);
    SCOPED_TRACE("budget " + std::to_string(b));
    if (!p.lm_head_resident) {
      saw_streamed_head = true;
      ASSERT_GE(p.lm_head_chunk_rows, 1);
      EXPECT_LE(Widened(p.lm_head_chunk_rows * lm_row), p.ring_slot_bytes);
      EXPECT_GE(p.lm_head_chunks * p.lm_head_chunk_rows, V);
      EXPECT_LT((p.lm_head_chunks - 1) * p.lm_head_chunk_rows, V);
    } else {
      EXPECT_EQ(p.lm_head_chunks, 0);
    }
    if (!p.embed_resident) {
      saw_streamed_embed = true;
      ASSERT_GE(p.embed_window_rows, 1);
      EXPECT_GE(p.embed_window_bytes, p.embed_window_rows * Widened(embed_row));
      EXPECT_LE(p.embed_window_bytes, std::max(o.embed_window, Widened(embed_row)));
    }
    // Pinned arena: header page + widened pinned layers + widened globals run.
    int64_t pinned = 4096 + Widened(p.globals_bytes);
    for (int l : p.pinned_layers) pinned += Widened(m.trunk_bytes[static_cast<size_t>(l)]);
    EXPECT_EQ(p.pinned_bytes, pinned);
    int64_t shm = 0;
    for (const auto& r : p.regions())
      if (r.process == "shm") shm += r.bytes;
    EXPECT_EQ(shm, p.pinned_bytes + p.ring_bytes + p.embed_window_bytes + p.expert_arena_bytes);
  }
  EXPECT_TRUE(saw_streamed_head);
  EXPECT_TRUE(saw_streamed_embed);
}

TEST(MemoryPlan, PinCapFromConfigLeavesMoreForExperts) {
  const PlanModel m = Synthetic();
  PlanOptions o = SmallOptions();
  const MemoryPlan free_plan = MakePlan(m, 500 * kMiB, o);
  o.max_pinned_trunk = 100 * kMiB;
  const MemoryPlan capped = MakePlan(m, 500 * kMiB, o);
  int64_t raw = 0;
  for (int l : capped.pinned_layers) raw += m.trunk_bytes[l];
  EXPECT_LE(raw, 100 * kMiB);
  EXPECT_LT(capped.pinned_layers.size(), free_plan.pinned_layers.size());
  EXPECT_GT(capped.expert_slots, free_plan.expert_slots);
  EXPECT_LE(capped.total, capped.budget);
}

// Experts read from a k3-expert-server arrive whole in ZeroMQ frames in the fetcher: the plan
// counts `remote_expert_frames` of them, raising the floor by exactly that much.
TEST(MemoryPlan, RemoteExpertFramesAreBudgeted) {
  const PlanModel m = Synthetic();
  PlanOptions local = SmallOptions(), remote = SmallOptions();
  remote.remote_expert_frames = 4;
  EXPECT_EQ(PlanFloor(m, remote) - PlanFloor(m, local), 4 * m.expert_bytes);
  const MemoryPlan p = MakePlan(m, PlanFloor(m, remote) + 200 * kMiB, remote);
  CheckInvariants(m, p);
  EXPECT_EQ(p.remote_frames, 4 * m.expert_bytes);
  const auto regions = p.regions();
  EXPECT_EQ(std::count_if(regions.begin(), regions.end(), [](const Region& r) { return r.region == "remote-frames"; }), 1);
  const MemoryPlan q = MakePlan(m, PlanFloor(m, remote) + 200 * kMiB, local);
  CheckInvariants(m, q);
  EXPECT_EQ(q.remote_frames, 0);
}

// --max-batch: every sequence beyond the first gets its own KDA state and MLA cache for the
// whole context (computed here from the config), in one batch-state region; 1 adds nothing.
TEST(MemoryPlan, BatchStateReservesEachExtraSequence) {
  const PlanModel m = Synthetic();
  const ModelConfig& c = m.cfg;
  PlanOptions one = SmallOptions();
  one.context = 512;
  int64_t n_kda = 0;
  for (MixerKind k : c.layer_kind) n_kda += k == MixerKind::KDA ? 1 : 0;
  const int64_t n_mla = c.num_layers - n_kda;
  const int64_t per_sequence =
      4 * (n_kda * (c.kda_heads * c.kda_head_dim * c.kda_head_dim + 3 * c.kda_heads * c.kda_head_dim * (c.conv_kernel - 1)) +
           n_mla * one.context * (c.kv_lora_rank + c.qk_rope_head_dim));
  ASSERT_GT(per_sequence, 0);
  const MemoryPlan p1 = MakePlan(m, PlanFloor(m, one) + 100 * kMiB, one);
  EXPECT_EQ(p1.batch_state, 0);
  const auto r1 = p1.regions();
  EXPECT_EQ(std::count_if(r1.begin(), r1.end(), [](const Region& r) { return r.region == "batch-state"; }), 0);
  PlanOptions four = one;
  four.max_batch = 4;
  const int64_t extra = PlanFloor(m, four) - PlanFloor(m, one);
  EXPECT_GE(extra, 3 * per_sequence);
  // Plus one decode row's scratch per extra sequence: small next to its state and cache.
  EXPECT_LT(extra, 3 * per_sequence + 3 * 4 * (64 * c.hidden_size + c.vocab_size + c.mla_heads * one.context) + 3 * kMiB);
  const MemoryPlan p4 = MakePlan(m, PlanFloor(m, four) + 100 * kMiB, four);
  CheckInvariants(m, p4);
  EXPECT_EQ(p4.batch_state, extra);
  const auto r4 = p4.regions();
  EXPECT_EQ(std::count_if(r4.begin(), r4.end(), [](const Region& r) { return r.region == "batch-state"; }), 1);
  EXPECT_NE(p4.Table().find("batch-state"), std::string::npos);
  // Linear in the extra sequences.
  PlanOptions seven = one;
  seven.max_batch = 7;
  EXPECT_EQ(PlanFloor(m, seven) - PlanFloor(m, one), 2 * extra);
  // Out of range: usage errors.
  for (int64_t bad : {int64_t{0}, kMaxBatch + 1}) {
    PlanOptions o = one;
    o.max_batch = bad;
    try {
      PlanFloor(m, o);
      ADD_FAILURE() << "max_batch " << bad << " accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), kExitUsage) << bad;
      EXPECT_NE(std::string(e.what()).find("--max-batch"), std::string::npos) << e.what();
    }
  }
}

TEST(MemoryPlan, ExpertSlotsCapLowersSlotsOnly) {
  const PlanModel m = Synthetic();
  const int64_t budget = PlanFloor(m, SmallOptions()) + 200 * kMiB;
  const MemoryPlan free_plan = MakePlan(m, budget, SmallOptions());
  ASSERT_GT(free_plan.expert_slots, m.cfg.top_k + 1);
  PlanOptions o = SmallOptions();
  o.max_expert_slots = m.cfg.top_k + 1;
  const MemoryPlan capped = MakePlan(m, budget, o);
  CheckInvariants(m, capped);
  EXPECT_EQ(capped.expert_slots, m.cfg.top_k + 1);
  EXPECT_TRUE(capped.expert_slots_capped);
  EXPECT_FALSE(free_plan.expert_slots_capped);
  EXPECT_EQ(capped.pinned_layers, free_plan.pinned_layers);  // nothing else moves
  o.max_expert_slots = free_plan.expert_slots + 10;  // above what the budget gives: no effect
  EXPECT_EQ(MakePlan(m, budget, o).expert_slots, free_plan.expert_slots);
  EXPECT_FALSE(MakePlan(m, budget, o).expert_slots_capped);
  o.max_expert_slots = m.cfg.top_k - 1;  // below one token's experts: refused
  try {
    MakePlan(m, budget, o);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), kExitUsage);
    EXPECT_NE(std::string(e.what()).find("--expert-slots"), std::string::npos) << e.what();
  }
}

TEST(MemoryPlan, RemoteFramesGrowWithTheServers) {
  const PlanModel m = Synthetic();
  PlanOptions one = SmallOptions(), three = SmallOptions();
  one.remote_expert_frames = 4;
  one.remote_servers = 1;
  three.remote_expert_frames = 3 * 4;
  three.remote_servers = 3;
  EXPECT_EQ(PlanFloor(m, three) - PlanFloor(m, one), 8 * m.expert_bytes);
  const MemoryPlan p = MakePlan(m, PlanFloor(m, three) + 200 * kMiB, three);
  CheckInvariants(m, p);
  EXPECT_EQ(p.remote_frames, 12 * m.expert_bytes);
  EXPECT_NE(p.Table().find("3 expert servers"), std::string::npos) << p.Table();
}

TEST(MemoryPlan, BadInputsAreUsageErrors) {
  PlanModel m = Synthetic();
  m.trunk_bytes.pop_back();
  try {
    PlanFloor(m, SmallOptions());
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), kExitUsage);
  }
  PlanOptions o = SmallOptions();
  o.ring_slots = 1;
  EXPECT_THROW(PlanFloor(Synthetic(), o), Error);
}

// The synthetic model's prefix snapshot of n positions, written out: 6 KDA layers of 4 heads x
// 32 x 32 state + 3 conv windows of 3 x 128, 2 MLA layers of 64 + 16 floats per position, and
// one int32 id per position.
int64_t SyntheticSnapshot(int64_t n) { return 4 * (6 * (4 * 32 * 32 + 3 * 3 * 128) + n * (2 * (64 + 16) + 1)); }

std::optional<Region> FindRegion(const MemoryPlan& p, const std::string& name) {
  for (const Region& r : p.regions())
    if (r.region == name) return r;
  return std::nullopt;
}

TEST(MemoryPlan, PrefixCacheAutoTakesAQuarterOfTheHeadroomUpToTwoFullContextSnapshots) {
  const PlanModel m = Synthetic();
  PlanOptions off = SmallOptions();
  PlanOptions autos = off;
  autos.prefix_cache = kPrefixCacheAuto;
  EXPECT_EQ(PrefixSnapshotBytes(m.cfg, 4096), SyntheticSnapshot(4096));
  const int64_t floor = PlanFloor(m, off);
  EXPECT_EQ(PlanFloor(m, autos), floor);  // auto never raises the floor
  const MemoryPlan at_floor = MakePlan(m, floor, autos);
  EXPECT_EQ(at_floor.prefix_cache, 0);
  EXPECT_EQ(at_floor.expert_slots, MakePlan(m, floor, off).expert_slots);
  for (int64_t headroom : {8 * kMiB, 13 * kMiB + 5, 100 * kMiB, 600 * kMiB}) {
    const MemoryPlan p = MakePlan(m, floor + headroom, autos);
    CheckInvariants(m, p);
    EXPECT_EQ(p.prefix_cache, std::min(headroom / 4, 2 * SyntheticSnapshot(4096))) << headroom;
    const std::optional<Region> r = FindRegion(p, "prefix-cache");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->process, "compute");
    EXPECT_EQ(r->bytes, p.prefix_cache);
    EXPECT_NE(r->note.find("auto"), std::string::npos) << r->note;
    // What the cache takes, the expert slots lose; nothing else changes.
    const MemoryPlan o = MakePlan(m, floor + headroom, off);
    EXPECT_LE(p.expert_slots, o.expert_slots);
    EXPECT_EQ(p.kda_state, o.kda_state);
    EXPECT_FALSE(FindRegion(o, "prefix-cache"));  // off: no region
  }
}

TEST(MemoryPlan, AnExplicitPrefixCacheIsPartOfTheFloor) {
  const PlanModel m = Synthetic();
  PlanOptions o = SmallOptions();
  const int64_t floor = PlanFloor(m, o);
  o.prefix_cache = 100 * kMiB;
  EXPECT_EQ(PlanFloor(m, o), floor + 100 * kMiB);
  const MemoryPlan p = MakePlan(m, floor + 100 * kMiB, o);
  CheckInvariants(m, p);
  EXPECT_EQ(p.prefix_cache, 100 * kMiB);
  ASSERT_TRUE(FindRegion(p, "prefix-cache"));
  EXPECT_EQ(FindRegion(p, "prefix-cache")->bytes, 100 * kMiB);
  EXPECT_NE(p.Table().find("prefix-cache"), std::string::npos);
  try {
    MakePlan(m, floor + 100 * kMiB - 1, o);
    FAIL() << "a budget without room for the cache accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), kExitBudget);
  }
  o.prefix_cache = -2;
  EXPECT_THROW(PlanFloor(m, o), Error);
}

// Batching and prefix reuse together (serve mode): the batch-state region (a state per sequence
// beyond the first, where a hit is copied) and the prefix-cache region (the snapshots) are both
// in the plan, each its own size, and the floor counts both.
TEST(MemoryPlan, BatchStateAndPrefixCacheAreBothCounted) {
  const PlanModel m = Synthetic();
  PlanOptions o = SmallOptions();
  const int64_t base = PlanFloor(m, o);
  PlanOptions batch = o;
  batch.max_batch = 4;
  const int64_t batch_extra = PlanFloor(m, batch) - base;
  ASSERT_GT(batch_extra, 0);
  PlanOptions both = batch;
  both.prefix_cache = 100 * kMiB;
  EXPECT_EQ(PlanFloor(m, both), base + batch_extra + 100 * kMiB);
  const MemoryPlan p = MakePlan(m, PlanFloor(m, both) + 200 * kMiB, both);
  CheckInvariants(m, p);
  ASSERT_TRUE(FindRegion(p, "batch-state"));
  ASSERT_TRUE(FindRegion(p, "prefix-cache"));
  EXPECT_EQ(FindRegion(p, "batch-state")->bytes, batch_extra);
  EXPECT_EQ(FindRegion(p, "prefix-cache")->bytes, 100 * kMiB);
  // auto above a batched floor: a quarter of what lies above it, up to two full-context snapshots.
  both.prefix_cache = kPrefixCacheAuto;
  const int64_t floor = PlanFloor(m, both);
  EXPECT_EQ(floor, base + batch_extra);
  const MemoryPlan a = MakePlan(m, floor + 8 * kMiB, both);
  CheckInvariants(m, a);
  EXPECT_EQ(a.prefix_cache, std::min<int64_t>(2 * kMiB, 2 * PrefixSnapshotBytes(m.cfg, both.context)));
  EXPECT_EQ(a.batch_state, batch_extra);
}

TEST(ParsePrefixCache, SizesOffAndAuto) {
  EXPECT_EQ(ParsePrefixCache("512M", "prefix_cache", true), 512 * kMiB);
  EXPECT_EQ(ParsePrefixCache("2G", "prefix_cache", false), 2 * kGiB);
  EXPECT_EQ(ParsePrefixCache("0", "prefix_cache", true), 0);
  EXPECT_EQ(ParsePrefixCache("off", "prefix_cache", true), 0);
  EXPECT_EQ(ParsePrefixCache("auto", "prefix_cache", true), kPrefixCacheAuto);
  for (const char* bad : {"", "x", "-1", "12Q", "auto2"}) {
    try {
      ParsePrefixCache(bad, "--prefix-cache", true);
      FAIL() << bad;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), kExitUsage);
      EXPECT_NE(std::string(e.what()).find("--prefix-cache"), std::string::npos) << e.what();
    }
  }
  try {
    ParsePrefixCache("auto", "--prefix-cache", false);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), kExitUsage);
  }
}

TEST(ParseBudget, UnitsAndErrors) {
  EXPECT_EQ(ParseBudget("8G"), 8 * kGiB);
  EXPECT_EQ(ParseBudget("32g"), 32 * kGiB);
  EXPECT_EQ(ParseBudget("512M"), 512 * kMiB);
  EXPECT_EQ(ParseBudget("1.5T"), 3 * (1ll << 39));
  EXPECT_EQ(ParseBudget("32GiB"), 32 * kGiB);
  EXPECT_EQ(ParseBudget("4096"), 4096);
  EXPECT_GT(ParseBudget("auto"), 0);
  for (const char* bad : {"", "G", "-5G", "1.2.3G", "12Q", "0", "1e3G", "8 G"}) {
    try {
      ParseBudget(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), kExitUsage) << bad;
    }
  }
}

// ---------------------------- the prefill chunk ----------------------------

// Bytes read for a generated token plus a prompt token under plan p, from the price formula
// written out here (flat routing, the cache holding its share of all experts).
double PairPrice(const PlanModel& m, const MemoryPlan& p) {
  double trunk = p.lm_head_resident ? 0.0 : static_cast<double>(m.lm_head_bytes);
  for (int l = 0; l < m.cfg.num_layers; ++l)
    if (std::count(p.pinned_layers.begin(), p.pinned_layers.end(), l) == 0) trunk += static_cast<double>(m.trunk_bytes[l]);
  const double E = static_cast<double>(m.cfg.num_experts), k = static_cast<double>(m.cfg.top_k);
  const double moe = static_cast<double>(m.cfg.num_layers - m.cfg.first_k_dense_replace);
  const double miss = 1.0 - std::min(1.0, static_cast<double>(p.expert_slots) / (moe * E));
  const double T = static_cast<double>(p.prefill_chunk);
  const double expert = static_cast<double>(Widened(m.expert_bytes));  // read widened to 4096 bounds
  const double gen = trunk + moe * k * miss * expert;
  const double chunk = trunk + moe * E * (1.0 - std::pow(1.0 - k / E, T)) * miss * expert;
  return gen + chunk / T;
}

// The chunk fits (its plan is within the budget; one more token's plan is not, unless the cap
// or the context stopped it), and no chunk that fits is cheaper among the candidates.
TEST(MemoryPlan, PrefillChunkIsTheCheapestThatFitsAndNeverOneThatDoesNot) {
  const PlanModel m = Synthetic();
  PlanOptions o = SmallOptions();
  o.prefill_chunk = 0;  // no cap: up to the context
  o.context = 4096;
  const int64_t floor = PlanFloor(m, o);
  double prev_price = 1e300;
  for (int64_t b = floor; b < floor + 1200 * kMiB; b += 37 * kMiB + 4321) {
    const MemoryPlan p = MakePlan(m, b, o);
    SCOPED_TRACE("budget " + std::to_string(b) + ", chunk " + std::to_string(p.prefill_chunk));
    CheckInvariants(m, p, o);
    EXPECT_GE(p.prefill_chunk, kFloorChunk);
    EXPECT_LE(p.prefill_chunk, p.prefill_chunk_fits);
    EXPECT_LE(p.prefill_chunk_fits, o.context);
    EXPECT_EQ(p.scratch, ScratchBytes(m.cfg, o.context, p.prefill_chunk, 0));
    if (p.prefill_chunk_fits < o.context) {
      try {
        MakePlanAtChunk(m, b, o, p.prefill_chunk_fits + 1);
        ADD_FAILURE() << "a chunk of " << p.prefill_chunk_fits + 1 << " fits too";
      } catch (const Error& e) {
        EXPECT_EQ(e.code(), kExitBudget);
      }
    }
    const double price = PairPrice(m, p);
    for (int64_t c : {int64_t{64}, int64_t{128}, int64_t{256}, int64_t{512}, int64_t{1024}, p.prefill_chunk_fits})
      if (c <= p.prefill_chunk_fits) {
        EXPECT_LE(price, PairPrice(m, MakePlanAtChunk(m, b, o, c)) * (1 + 1e-12)) << c;
      }
    // More budget never makes a token dearer.
    EXPECT_LE(price, prev_price * (1 + 1e-12));
    prev_price = price;
  }
}

TEST(MemoryPlan, PrefillChunkCapAndFloor) {
  const PlanModel m = Synthetic();
  PlanOptions o = SmallOptions();
  o.context = 4096;
  o.prefill_chunk = 0;
  const int64_t floor = PlanFloor(m, o);
  // The floor is the plan at a chunk of kFloorChunk: at it, that is the chunk.
  EXPECT_EQ(MakePlan(m, floor, o).prefill_chunk, kFloorChunk);
  EXPECT_EQ(floor, PlanFloor(m, SmallOptions()));  // the same context, chunk 64
  // A cap below kFloorChunk lowers the floor by those rows' scratch and fixes the chunk.
  PlanOptions five = o;
  five.prefill_chunk = 5;
  EXPECT_EQ(floor - PlanFloor(m, five), 59 * ScratchRowBytes(m.cfg));
  EXPECT_EQ(MakePlan(m, 2 * kGiB, five).prefill_chunk, 5);
  // A cap above what fits: the plan takes what fits (the dry run notes the cap).
  PlanOptions huge = o;
  huge.prefill_chunk = 1 << 20;
  const MemoryPlan h = MakePlan(m, floor + 40 * kMiB, huge);
  EXPECT_LT(h.prefill_chunk_fits, 4096);
  EXPECT_EQ(h.prefill_chunk_cap, 4096);  // the context
  EXPECT_LE(h.total, floor + 40 * kMiB);
  // Kept prompt logits (--perplexity) cost a vocabulary row per chunk token, twice, plus the row.
  EXPECT_EQ(ScratchRowBytes(m.cfg, true) - ScratchRowBytes(m.cfg), 4 * (2 * m.cfg.vocab_size + m.cfg.hidden_size));
  // Everything resident: nothing to read at any chunk, so the largest that fits.
  const MemoryPlan all = MakePlan(m, 8 * kGiB, o);
  EXPECT_EQ(all.prefill_chunk, 4096);
}

// Scratch per chunk row, counted here from the buffers of compute's pass (forward.cpp, kda.cpp,
// mla.cpp, ffn.cpp) for the synthetic model: (blocks + 4)·H + 1 + K for the pass, plus the
// largest layer's own buffers.
TEST(MemoryPlan, ScratchRowCountsTheLargestLayersBuffers) {
  const ModelConfig c = synthetic::SyntheticConfig(8, 4);  // H 256, 2 blocks of 4, K 4, E 16
  const int64_t pass = (2 + 4) * 256 + 1 + 4;
  const int64_t kda = 6 * 128 + 32 + 4;                                 // q k v gate z y, f_a, beta
  const int64_t mla = 0 + 4 * 48 + 64 + 16 + 2 * 4 * 32 + 4;           // cq (no q_lora), q, ckv, attn+gate, rows
  const int64_t dense = 2 * 512;                                        // a, b
  const int64_t moe = 16 + 16 + 256 + 256 + std::max(2 * 128, 4 * 256 + 256);  // latent = H here
  EXPECT_EQ(ScratchRowBytes(c), 4 * (pass + std::max({kda, mla, dense, moe})));
}

// ---------------------------- the real release ----------------------------

class RealRelease : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    cfg_ = new ModelConfig(LoadModelConfig(std::string(K3_RELEASE_DATA_DIR) + "/config.json"));
  }
  static void TearDownTestSuite() { delete cfg_; }
  static ModelConfig* cfg_;
};
ModelConfig* RealRelease::cfg_ = nullptr;

TEST_F(RealRelease, TrunkSizesFromShapesAndReleaseDtypes) {
  const PlanModel m = PlanModelFromConfig(*cfg_);
  ASSERT_EQ(m.trunk_bytes.size(), 93u);
  const int64_t total = std::accumulate(m.trunk_bytes.begin(), m.trunk_bytes.end(), int64_t{0});
  std::cout << "real trunk total " << total << " bytes, layer 0 " << m.trunk_bytes[0] << ", layer 1 "
            << m.trunk_bytes[1] << ", layer 3 " << m.trunk_bytes[3] << "\n";
  EXPECT_NEAR(static_cast<double>(total), 108.81e9, 0.01e9);  // docs/model.md, "Release sizes"
  // Shard 1 (layer 0 only, dense) is 2,341,216,112 bytes including its header (docs/model.md, "Release sizes").
  EXPECT_LT(m.trunk_bytes[0], 2341216112);
  EXPECT_GT(m.trunk_bytes[0], 2341216112 - 16384);
  EXPECT_EQ(m.expert_bytes, 17547264);
  // Largest layer is the dense layer 0; KDA layers are larger than MLA layers.
  EXPECT_EQ(std::max_element(m.trunk_bytes.begin(), m.trunk_bytes.end()) - m.trunk_bytes.begin(), 0);
  EXPECT_GT(m.trunk_bytes[1], m.trunk_bytes[3]);
}

TEST_F(RealRelease, EveryTrunkTensorIsInTheIndexInItsLayersShard) {
  const SafetensorsIndex idx = LoadSafetensorsIndex(std::string(K3_RELEASE_DATA_DIR) + "/model.safetensors.index.json.gz");
  size_t n = 0;
  for (int l = 0; l < cfg_->num_layers; ++l) {
    char shard[64];
    std::snprintf(shard, sizeof shard, "model-%05d-of-000096.safetensors", l + 1);
    for (const auto& name : LayerTrunkNames(*cfg_, l)) {
      auto it = idx.weight_map.find(name);
      ASSERT_NE(it, idx.weight_map.end()) << name;
      EXPECT_EQ(it->second, shard) << name;
      ++n;
    }
  }
  EXPECT_EQ(n, 2460u - 5u);  // docs/model.md, "Release sizes": 2,460 text tensors, 5 of them model-level
}

TEST_F(RealRelease, PlansAt2G4G8G32G128G) {
  const PlanModel m = PlanModelFromConfig(*cfg_);
  PlanOptions o;
  o.prefill_chunk = kFloorChunk;  // one chunk: more budget pins at least as many layers
  const int64_t floor = PlanFloor(m, o);
  std::cout << "real floor (context " << o.context << "): " << FormatBytes(floor) << "\n";
  // Issue 16: trunk pieces bring the floor at context 4096 to at most 2.0 GiB (5.67 GiB with
  // whole-layer slots).
  EXPECT_LE(floor, 2 * kGiB);
  PlanOptions whole;
  whole.trunk_piece = kTrunkPieceLayer;
  EXPECT_GT(PlanFloor(m, whole), 5 * kGiB);
  size_t prev_pinned = 0;
  for (int64_t gib : {2, 4, 8, 32, 128}) {
    const MemoryPlan p = MakePlan(m, gib * kGiB, o);
    std::cout << "---- budget " << gib << "G: " << p.pinned_layers.size() << " layers pinned, lm_head "
              << (p.lm_head_resident ? "resident" : "streamed") << ", " << p.expert_slots << " expert slots\n"
              << p.Table();
    CheckInvariants(m, p);
    EXPECT_GE(p.pinned_layers.size(), prev_pinned);
    prev_pinned = p.pinned_layers.size();
    if (gib == 128) {
      EXPECT_GE(p.pinned_layers.size(), 85u) << "most trunk layers pinned at 128G";
      EXPECT_GT(p.expert_slots, 100);
    }
  }
  // prefix_cache = auto at 32G: two full-context snapshots, the floor unchanged.
  PlanOptions autos;
  autos.prefix_cache = kPrefixCacheAuto;
  EXPECT_EQ(PlanFloor(m, autos), floor);
  const MemoryPlan served = MakePlan(m, 32 * kGiB, autos);
  std::cout << "---- budget 32G, prefix_cache auto (one full-context snapshot "
            << FormatBytes(PrefixSnapshotBytes(m.cfg, o.context)) << ")\n" << served.Table();
  CheckInvariants(m, served);
  EXPECT_EQ(served.prefix_cache, 2 * PrefixSnapshotBytes(m.cfg, o.context));
  // A 1M-token context needs a bigger floor (the MLA cache grows with it).
  PlanOptions longctx;
  longctx.context = 1 << 20;
  EXPECT_GT(PlanFloor(m, longctx), floor);
}

}  // namespace
}  // namespace k3::plan
