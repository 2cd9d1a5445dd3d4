// Arena sizes computed from the model layout (what the services will actually write into
// each arena) given the plan's decisions (which layers are pinned, how many slots, what
// streams). The plan sizes the same regions with its own arithmetic; k3-launch refuses to run
// when the two disagree (docs/pipeline.md "Arena formatting and sizes").
#pragma once
#include <cstdint>

#include "common/plan/memory_plan.h"
#include "model_layout.h"

namespace k3::launch {

struct ArenaSizes {
  int64_t pinned = 0;
  int64_t embed_window = 0;  // 0: the embedding is resident in trunk-pinned
  uint32_t ring_slots = 0;
  int64_t ring_slot_bytes = 0;
  int64_t ring = 0;
  uint32_t expert_slots = 0;
  int64_t expert_slot_bytes = 0;
  int64_t experts = 0;
  int64_t total() const { return pinned + embed_window + ring + experts; }
};

// Uses from `p` only its decisions: pinned_layers, lm_head_resident, embed_resident,
// ring_slots, expert_slots, lm_head_chunk_rows and embed_window_rows. Every byte count comes
// from `m` (shard headers, or config + release dtypes for an index-only dry run).
ArenaSizes SizeArenas(const ModelLayout& m, const plan::MemoryPlan& p);

}  // namespace k3::launch
