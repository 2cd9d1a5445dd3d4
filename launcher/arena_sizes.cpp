#include "arena_sizes.h"

#include <algorithm>

#include "common/ipc/slot_table.h"
#include "common/plan/head_stream.h"
#include "common/read_window.h"

namespace k3::launch {
namespace {

int64_t SlotArena(int64_t slots, int64_t slot_bytes) {
  if (slots <= 0) return 0;
  return static_cast<int64_t>(
      ipc::SlotTable::BytesNeeded(static_cast<uint32_t>(slots), static_cast<uint64_t>(slot_bytes)));
}

// The globals run the trunk reader pins: [min, max) of the resident model-level tensors. The
// layout has it from the shard headers; an index-only layout packs them back to back.
int64_t GlobalsRun(const plan::PlanModel& pm, bool embed, bool head) {
  const int combo = (embed ? 1 : 0) | (head ? 2 : 0);
  if (pm.globals_run[combo] >= 0) return pm.globals_run[combo];
  const int64_t small = std::clamp<int64_t>(pm.small_globals_bytes, 0, pm.lm_head_bytes);
  return small + (embed ? pm.embed_bytes : 0) + (head ? pm.lm_head_bytes - small : 0);
}

int64_t RowBytes(int64_t given, int64_t tensor_bytes, int64_t vocab) {
  if (given > 0) return given;
  vocab = std::max<int64_t>(vocab, 1);
  return std::max<int64_t>(1, (tensor_bytes + vocab - 1) / vocab);
}

}  // namespace

ArenaSizes SizeArenas(const ModelLayout& m, const plan::MemoryPlan& p) {
  const plan::PlanModel& pm = m.plan_model;
  const int64_t layers = static_cast<int64_t>(pm.trunk_bytes.size());
  std::vector<bool> pinned(static_cast<size_t>(layers), false);
  for (int l : p.pinned_layers)
    if (l >= 0 && l < layers) pinned[static_cast<size_t>(l)] = true;

  ArenaSizes a;
  // trunk-pinned: a header page, then every pinned layer and the globals run, each read
  // widened to 4096 bounds at a 4096-aligned offset.
  a.pinned = static_cast<int64_t>(kReadAlign) + WidenedBytes(GlobalsRun(pm, p.embed_resident, p.lm_head_resident));
  int64_t widest_streamed = 0, min_piece = 0;
  for (int64_t l = 0; l < layers; ++l) {
    const int64_t w = WidenedBytes(pm.trunk_bytes[static_cast<size_t>(l)]);
    if (pinned[static_cast<size_t>(l)]) {
      a.pinned += w;
    } else {
      widest_streamed = std::max(widest_streamed, w);
      min_piece = std::max(min_piece, plan::LayerMinPieceSlot(pm, static_cast<int>(l)));
    }
  }
  // trunk-ring slots hold the widest streamed layer or, with trunk pieces, the plan's piece
  // size (docs/trunk-pieces.md), and, when lm_head streams, one chunk of lm_head rows (read
  // widened); never less than a page.
  int64_t slot = std::max(static_cast<int64_t>(kReadAlign), plan::TrunkSlotBytes(widest_streamed, min_piece, p.trunk_piece,
                                                                                   pm.coded_trunk_bytes.empty() ? 0 : plan::kCodedSlotMargin));
  if (!p.lm_head_resident) {
    const int64_t small = std::clamp<int64_t>(pm.small_globals_bytes, 0, pm.lm_head_bytes);
    const int64_t row = RowBytes(pm.lm_head_row_bytes, pm.lm_head_bytes - small, m.cfg.vocab_size);
    slot = std::max(slot, WidenedBytes(p.lm_head_chunk_rows * row));
  }
  a.ring_slots = static_cast<uint32_t>(p.ring_slots);
  a.ring_slot_bytes = slot;
  a.ring = SlotArena(p.ring_slots, slot);
  // embed-window: one widened row per stride when the embedding is not resident.
  if (!p.embed_resident)
    a.embed_window = p.embed_window_rows *
                     plan::EmbedRowStride(RowBytes(pm.embed_row_bytes, pm.embed_bytes, m.cfg.vocab_size));
  // experts: each slot takes the largest routed expert's run, widened.
  a.expert_slots = static_cast<uint32_t>(p.expert_slots);
  a.expert_slot_bytes = WidenedBytes(pm.expert_bytes);
  a.experts = SlotArena(p.expert_slots, a.expert_slot_bytes);
  return a;
}

}  // namespace k3::launch
