// The plan's shared-memory layout (internal to common/plan): the pinning candidates and the
// arenas the launcher creates for a given set of pinned candidates. launcher/arena_sizes.cpp
// computes the same arenas from the model layout, and k3-launch compares the two.
#pragma once
#include <cstdint>
#include <vector>

#include "common/plan/memory_plan.h"

namespace k3::plan {

// One aligned block: the arena header page, and the smallest ring slot.
inline constexpr int64_t kPage = 4096;

// A slot table of `slots` slots of `slot_bytes` (header + slots; 0 for no slots).
int64_t SlotArena(int64_t slots, int64_t slot_bytes);

// Pinning candidates: every trunk layer and lm_head (layer -1), largest first.
struct Candidate {
  int layer;  // -1 = lm_head
  int64_t bytes;
};

// Every trunk layer and lm_head, largest first (stable: equal sizes keep layer order).
std::vector<Candidate> Candidates(const PlanModel& m);

struct Layout {
  int64_t pinned = 0, globals = 0, ring = 0, ring_slot = 0, embed_window = 0, embed_rows = 0;
  int ring_slots = 0;
  bool pieced = false;
  int64_t lm_rows = 0, lm_chunks = 0;
  bool lm_pinned = false;
  int64_t trunk_pinned_raw = 0;  // for the max_pinned_trunk cap
};

// The shared-memory layout with the first k candidates pinned; exactly what the launcher
// creates (pinned arena = header page + widened layers + widened globals run). `m` is
// normalized (NormalizedPlanModel).
Layout LayoutFor(const PlanModel& m, const std::vector<Candidate>& cands, size_t k, const PlanOptions& o,
                 bool embed_resident);

// The three trunk-side arenas of a layout (the expert arena is sized apart).
inline int64_t ShmBytes(const Layout& l) { return l.pinned + l.ring + l.embed_window; }

}  // namespace k3::plan
