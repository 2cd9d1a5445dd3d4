// Arena sizes from the layout must equal the plan's shm regions: two independent
// computations (launcher/arena_sizes.cpp from the byte runs, common/plan from its own
// arithmetic) that k3-launch compares before creating anything.
#include "launcher/arena_sizes.h"

#include <gtest/gtest.h>

#include "common/ipc/slot_table.h"
#include "tests/unit/plan/synthetic_model.h"

namespace k3::launch {
namespace {

using synthetic::kGiB;
using synthetic::kMiB;
using synthetic::Widened;

// A layout as the shard headers give it: uneven layers, globals runs whose size depends on
// which of embedding and lm_head are in it, odd row sizes.
ModelLayout Synthetic() {
  ModelLayout m;
  m.cfg = synthetic::SyntheticConfig(6, 3);
  plan::PlanModel& pm = m.plan_model;
  pm.cfg = m.cfg;
  pm.trunk_bytes = {30 * kMiB + 11, 20 * kMiB + 4000, 20 * kMiB, 12 * kMiB + 1, 21 * kMiB + 7, 9 * kMiB};
  pm.expert_bytes = 2 * kMiB + 333;
  pm.embed_bytes = 1000 * 2050;
  pm.small_globals_bytes = 4096 + 300;
  pm.lm_head_bytes = 1000 * 2050 + pm.small_globals_bytes;
  pm.embed_row_bytes = 2050;
  pm.lm_head_row_bytes = 2050;
  pm.globals_run[0] = pm.small_globals_bytes + 17;  // gaps between tensors in the file
  pm.globals_run[1] = pm.globals_run[0] + pm.embed_bytes + 5;
  pm.globals_run[2] = pm.globals_run[0] + 1000 * 2050 + 9;
  pm.globals_run[3] = pm.globals_run[0] + 2 * 1000 * 2050 + 21;
  m.from_headers = true;
  return m;
}

void ExpectEqualToPlan(const ArenaSizes& a, const plan::MemoryPlan& p) {
  SCOPED_TRACE("budget " + std::to_string(p.budget));
  EXPECT_EQ(a.pinned, p.pinned_bytes);
  EXPECT_EQ(a.ring_slots, static_cast<uint32_t>(p.ring_slots));
  EXPECT_EQ(a.ring_slot_bytes, p.ring_slot_bytes);
  EXPECT_EQ(a.ring, p.ring_bytes);
  EXPECT_EQ(a.embed_window, p.embed_window_bytes);
  EXPECT_EQ(a.expert_slots, static_cast<uint32_t>(p.expert_slots));
  EXPECT_EQ(a.expert_slot_bytes, p.expert_slot_bytes);
  EXPECT_EQ(a.experts, p.expert_arena_bytes);
}

TEST(SizeArenas, EqualsThePlanAtEveryBudget) {
  const ModelLayout m = Synthetic();
  plan::PlanOptions o;
  o.tokenizer_bytes = kMiB;
  o.process_overhead = kMiB;
  o.lm_head_window = 3 * kMiB;  // smaller than lm_head: it streams in chunks
  o.embed_window = kMiB;
  const int64_t floor = plan::PlanFloor(m.plan_model, o);
  int seen_streamed_head = 0, seen_all_pinned = 0;
  for (int64_t b = floor; b < floor + 1200 * kMiB; b += 7 * kMiB + 12345) {
    const plan::MemoryPlan p = plan::MakePlan(m.plan_model, b, o);
    ExpectEqualToPlan(SizeArenas(m, p), p);
    seen_streamed_head += !p.lm_head_resident;
    seen_all_pinned += static_cast<int64_t>(p.pinned_layers.size()) == m.cfg.num_layers;
  }
  EXPECT_GT(seen_streamed_head, 0);
  EXPECT_GT(seen_all_pinned, 0);
  // Trunk pieces (docs/trunk-pieces.md): slots smaller than the layers, and whole-layer slots.
  int seen_pieced = 0;
  for (const int64_t piece : {int64_t{4096}, 5 * kMiB + 1, plan::kTrunkPieceLayer}) {
    o.trunk_piece = piece;
    const int64_t f = plan::PlanFloor(m.plan_model, o);
    for (int64_t b = f; b < f + 300 * kMiB; b += 11 * kMiB + 777) {
      const plan::MemoryPlan p = plan::MakePlan(m.plan_model, b, o);
      ExpectEqualToPlan(SizeArenas(m, p), p);
      seen_pieced += p.trunk_pieced;
    }
  }
  EXPECT_GT(seen_pieced, 0);
}

TEST(SizeArenas, ComputedFromTheLayoutNotCopiedFromThePlan) {
  const ModelLayout m = Synthetic();
  const plan::MemoryPlan p = plan::MakePlan(m.plan_model, 2 * kGiB);
  const ArenaSizes a = SizeArenas(m, p);
  // By hand from the byte runs: header page + widened pinned layers + widened globals run.
  int64_t pinned = 4096;
  int64_t widest_streamed = 0;
  for (int l = 0; l < m.cfg.num_layers; ++l) {
    const bool is_pinned = std::count(p.pinned_layers.begin(), p.pinned_layers.end(), l) > 0;
    if (is_pinned) pinned += Widened(m.plan_model.trunk_bytes[l]);
    else widest_streamed = std::max(widest_streamed, Widened(m.plan_model.trunk_bytes[l]));
  }
  pinned += Widened(m.plan_model.globals_run[(p.embed_resident ? 1 : 0) | (p.lm_head_resident ? 2 : 0)]);
  EXPECT_EQ(a.pinned, pinned);
  EXPECT_EQ(a.expert_slot_bytes, Widened(m.plan_model.expert_bytes));
  EXPECT_EQ(a.experts, static_cast<int64_t>(ipc::SlotTable::BytesNeeded(static_cast<uint32_t>(p.expert_slots),
                                                                        static_cast<uint64_t>(a.expert_slot_bytes))));
  if (widest_streamed > 0) {  // 64 MiB pieces: more than any layer here, so whole-layer slots
    EXPECT_FALSE(p.trunk_pieced);
    EXPECT_GE(a.ring_slot_bytes, widest_streamed);
  }

  // A plan made for other byte counts than the layout's no longer matches: the comparison
  // in k3-launch catches a plan and a layout that disagree.
  ModelLayout other = m;
  other.plan_model.expert_bytes += 8192;
  other.plan_model.trunk_bytes[0] += 8192;
  const ArenaSizes b = SizeArenas(other, p);
  EXPECT_NE(b.expert_slot_bytes, p.expert_slot_bytes);
  EXPECT_NE(b.experts, p.expert_arena_bytes);
}

TEST(SizeArenas, ReleaseModelFromItsIndexAt8And32And128G) {
  const ModelLayout m = LoadModelLayout(K3_RELEASE_DATA_DIR, true);
  ASSERT_FALSE(m.from_headers);
  for (int64_t g : {8, 32, 128}) {
    const plan::MemoryPlan p = plan::MakePlan(m.plan_model, g * kGiB);
    ExpectEqualToPlan(SizeArenas(m, p), p);
  }
}

}  // namespace
}  // namespace k3::launch
