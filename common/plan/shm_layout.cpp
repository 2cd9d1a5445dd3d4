#include "common/plan/shm_layout.h"

#include <algorithm>

#include "common/ipc/slot_table.h"
#include "common/plan/head_stream.h"
#include "common/read_window.h"

namespace k3::plan {

static_assert(kPage == static_cast<int64_t>(kReadAlign));

int64_t SlotArena(int64_t slots, int64_t slot_bytes) {
  if (slots <= 0) return 0;
  return static_cast<int64_t>(ipc::SlotTable::BytesNeeded(static_cast<uint32_t>(slots), static_cast<uint64_t>(slot_bytes)));
}

std::vector<Candidate> Candidates(const PlanModel& m) {
  std::vector<Candidate> c;
  c.push_back({-1, m.lm_head_bytes});
  for (int l = 0; l < static_cast<int>(m.trunk_bytes.size()); ++l) c.push_back({l, m.trunk_bytes[l]});
  std::stable_sort(c.begin(), c.end(), [](const Candidate& a, const Candidate& b) { return a.bytes > b.bytes; });
  return c;
}

Layout LayoutFor(const PlanModel& m, const std::vector<Candidate>& cands, size_t k, const PlanOptions& o,
                 bool embed_resident) {
  Layout l;
  for (size_t i = 0; i < k; ++i) {
    if (cands[i].layer < 0) {
      l.lm_pinned = true;
      continue;
    }
    l.pinned += WidenedBytes(cands[i].bytes);
    l.trunk_pinned_raw += cands[i].bytes;
  }
  l.globals = m.globals_run[(embed_resident ? 1 : 0) | (l.lm_pinned ? 2 : 0)];
  l.pinned += kPage + WidenedBytes(l.globals);
  int64_t widest = 0, min_piece = 0;
  for (size_t i = k; i < cands.size(); ++i)
    if (cands[i].layer >= 0) {
      widest = std::max(widest, WidenedBytes(cands[i].bytes));
      min_piece = std::max(min_piece, m.min_piece_slot[static_cast<size_t>(cands[i].layer)]);
    }
  // Streamed layers larger than a slot arrive in pieces (docs/trunk-pieces.md §5).
  l.ring_slot = TrunkSlotBytes(widest, min_piece, o.trunk_piece, m.coded_trunk_bytes.empty() ? 0 : kCodedSlotMargin);
  const int64_t V = m.cfg.vocab_size;
  const int64_t layer_slot = l.ring_slot;
  if (!l.lm_pinned) {
    // lm_head streams through the ring in row chunks: at least one row per slot, and a
    // window-sized chunk when no trunk layer streams.
    const int64_t lm_tensor = m.lm_head_row_bytes * V;
    if (l.ring_slot == 0) l.ring_slot = WidenedBytes(std::min(lm_tensor, std::max(o.lm_head_window, m.lm_head_row_bytes)));
    l.ring_slot = std::max(l.ring_slot, WidenedBytes(m.lm_head_row_bytes) + kPage);
    l.lm_rows = LmHeadChunkRows(l.ring_slot, m.lm_head_row_bytes, V);
    // The slot is what is read into it: the widest streamed layer or one widened chunk of
    // rows (the launcher sizes the arena from the layout the same way and compares).
    l.ring_slot = std::max(layer_slot, WidenedBytes(l.lm_rows * m.lm_head_row_bytes));
    l.lm_rows = LmHeadChunkRows(l.ring_slot, m.lm_head_row_bytes, V);
    l.lm_chunks = LmHeadChunks(l.lm_rows, V);
  }
  l.ring_slot = std::max(l.ring_slot, kPage);  // the ring exists even when everything is pinned
  l.pieced = l.ring_slot < widest;  // (a coded margin only ever makes the slot larger)
  l.ring_slots = TrunkRingSlots(l.ring_slot, widest, o.read_ahead, o.ring_slots);
  l.ring = SlotArena(l.ring_slots, l.ring_slot);
  if (!embed_resident) {
    const int64_t stride = EmbedRowStride(m.embed_row_bytes);
    l.embed_rows = std::clamp<int64_t>(o.embed_window / stride, 1, std::max<int64_t>(V, 1));
    l.embed_window = l.embed_rows * stride;
  }
  return l;
}

}  // namespace k3::plan
