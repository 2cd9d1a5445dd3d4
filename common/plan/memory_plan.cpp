#include "common/plan/memory_plan.h"

#include <algorithm>
#include <climits>
#include <string>

#include "common/error.h"
#include "common/plan/plan_inputs.h"
#include "common/plan/read_price.h"
#include "common/plan/shm_layout.h"
#include "common/read_window.h"

namespace k3::plan {
namespace {

// The options below this point carry a concrete chunk in prefill_chunk (AtChunk).
int64_t ChunkCap(const PlanOptions& o) { return o.prefill_chunk > 0 ? std::min(o.prefill_chunk, o.context) : o.context; }
int64_t FloorChunk(const PlanOptions& o) { return std::min(ChunkCap(o), kFloorChunk); }
PlanOptions AtChunk(PlanOptions o, int64_t chunk) {
  o.prefill_chunk = chunk;
  return o;
}

// Budget-independent parts: compute's state, the tokenizer's tables, per-process overhead,
// the fetcher's frames from expert servers, and k3-server's share when serving.
struct Fixed {
  int64_t kda_state = 0, mla_cache = 0, scratch = 0, overhead = 0, tokenizer = 0, remote = 0, spec = 0;
  int64_t batch = 0;   // BatchStateBytes
  int64_t prefix = 0;  // prefix-snapshot cache (an explicit size; auto is added by MakePlan)
  ServerMemory server;
  int64_t sum() const {
    return kda_state + mla_cache + scratch + overhead + tokenizer + remote + spec + batch + prefix + server.total();
  }
};

Fixed FixedCosts(const PlanModel& m, const PlanOptions& o) {
  const ModelConfig& c = m.cfg;
  Fixed f;
  f.kda_state = KdaStateBytes(c);
  f.mla_cache = MlaCacheBytes(c, o.context);
  f.scratch = ScratchBytes(c, o.context, o.prefill_chunk, o.spec_drafts, o.prompt_logits);
  f.spec = SpecRollbackBytes(c, o.spec_drafts);
  f.batch = BatchStateBytes(c, o.context, o.max_batch);
  f.overhead = PlannedProcesses(o) * o.process_overhead;
  f.prefix = std::max<int64_t>(o.prefix_cache, 0);
  f.tokenizer = o.tokenizer_bytes;
  // Each expert in flight from the server sits whole in a ZeroMQ frame until it is copied.
  f.remote = o.remote_expert_frames * m.expert_bytes;
  f.server = ServerBytes(o.serve, o.max_batch, o.context, c.vocab_size);
  return f;
}

// Everything except expert slots beyond top_k, with the first k candidates pinned.
int64_t Required(const PlanModel& m, const std::vector<Candidate>& cands, size_t k, const PlanOptions& o,
                 const Fixed& f, int64_t min_experts_arena) {
  return f.sum() + ShmBytes(LayoutFor(m, cands, k, o, false)) + min_experts_arena;
}

bool WithinCap(const PlanModel& m, const std::vector<Candidate>& cands, size_t k, const PlanOptions& o) {
  return o.max_pinned_trunk < 0 || LayoutFor(m, cands, k, o, false).trunk_pinned_raw <= o.max_pinned_trunk;
}

int64_t FloorOf(const PlanModel& m, const PlanOptions& o) {
  const auto cands = Candidates(m);
  const Fixed f = FixedCosts(m, o);
  const int64_t min_experts = SlotArena(m.cfg.top_k, WidenedBytes(m.expert_bytes));
  int64_t floor = INT64_MAX;
  for (size_t k = 0; k <= cands.size(); ++k)
    if (WithinCap(m, cands, k, o)) floor = std::min(floor, Required(m, cands, k, o, f, min_experts));
  return floor;
}

// The plan at the concrete chunk o.prefill_chunk; `sized` is `o` with an auto prefix cache
// resolved to bytes; `floor` is the plan's floor (at the floor's chunk).
MemoryPlan PlanAt(const PlanModel& m, int64_t budget, const PlanOptions& o, const PlanOptions& sized, int64_t floor) {
  const auto cands = Candidates(m);
  const Fixed f = FixedCosts(m, sized);
  // The fetcher reads an expert's run widened to 4096 bounds straight into its slot.
  const int64_t expert_slot = WidenedBytes(m.expert_bytes);
  const int64_t min_experts = SlotArena(m.cfg.top_k, expert_slot);

  // Largest prefix of candidates that fits (feasibility is monotone in the budget for each
  // k, so more budget never pins fewer layers at one chunk).
  size_t k = 0;
  for (size_t i = 0; i <= cands.size(); ++i)
    if (WithinCap(m, cands, i, o) && Required(m, cands, i, o, f, min_experts) <= budget) k = i;

  MemoryPlan p;
  p.budget = budget;
  p.floor = floor;
  p.prefill_chunk = o.prefill_chunk;
  p.scratch_row = ScratchRowBytes(m.cfg, o.prompt_logits);
  for (size_t i = 0; i < k; ++i) {
    if (cands[i].layer < 0) p.lm_head_resident = true;
    else p.pinned_layers.push_back(cands[i].layer);
  }
  std::sort(p.pinned_layers.begin(), p.pinned_layers.end());
  p.kda_state = f.kda_state;
  p.mla_cache = f.mla_cache;
  p.scratch = f.scratch;
  p.overhead = f.overhead;
  p.processes = PlannedProcesses(o);
  p.tokenizer = f.tokenizer;
  p.remote_frames = f.remote;
  p.remote_servers = o.remote_servers;
  p.spec_rollback = f.spec;
  p.batch_state = f.batch;
  p.prefix_cache = f.prefix;
  p.prefix_cache_auto = o.prefix_cache == kPrefixCacheAuto;
  p.prefix_snapshot_bytes = PrefixSnapshotBytes(m.cfg, o.context);
  p.serving = o.serve.serving;
  p.server = f.server;
  if (p.serving) {
    p.server_http_threads = ServeHttpThreads(o.serve.http_threads, o.max_batch, o.serve.queue_size);
    p.server_max_body = o.serve.max_body_bytes;
  }
  Layout l = LayoutFor(m, cands, k, o, false);
  int64_t used = f.sum() + ShmBytes(l);
  // Every remaining byte becomes expert slots (no more than the model has experts).
  const int64_t all_experts = std::max<int64_t>(m.cfg.top_k, m.cfg.routed_expert_count());
  int64_t slots = std::min(all_experts, (budget - used) / expert_slot);
  while (slots > m.cfg.top_k && SlotArena(slots, expert_slot) > budget - used) --slots;
  slots = std::max<int64_t>(slots, m.cfg.top_k);
  if (o.max_expert_slots >= 0 && slots > o.max_expert_slots) {  // an experiment's cap (--expert-slots)
    slots = o.max_expert_slots;
    p.expert_slots_capped = true;
  }
  // The embedding table is read a few rows per token, so it is made resident last: only
  // when every expert already has a slot and the larger pinned globals run still fits.
  if (slots == all_experts) {
    const Layout r = LayoutFor(m, cands, k, o, true);
    const int64_t used_r = f.sum() + ShmBytes(r);
    if (used_r + SlotArena(slots, expert_slot) <= budget) {
      l = r;
      used = used_r;
      p.embed_resident = true;
    }
  }
  p.globals_bytes = l.globals;
  p.pinned_bytes = l.pinned;
  p.ring_slot_bytes = l.ring_slot;
  p.ring_slots = l.ring_slots;
  p.trunk_piece = o.trunk_piece;
  p.trunk_pieced = l.pieced;
  p.ring_bytes = l.ring;
  p.embed_window_bytes = l.embed_window;
  p.embed_window_rows = l.embed_rows;
  p.lm_head_chunk_rows = l.lm_rows;
  p.lm_head_chunks = l.lm_chunks;
  p.expert_slots = slots;
  p.expert_slot_bytes = expert_slot;
  p.expert_arena_bytes = SlotArena(p.expert_slots, expert_slot);
  p.total = used + p.expert_arena_bytes;
  return p;
}


// Bytes read for one generated token plus one prompt token (in a full chunk) under plan `p`.
double TokenPairPrice(const PlanModel& m, const MemoryPlan& p) {
  const ReadPrice r = PriceAt(ReadModelOf(m, p), p.prefill_chunk);
  return r.per_generated_token + r.per_prompt_token;
}

}  // namespace

int64_t PlanFloor(const PlanModel& model, const PlanOptions& o) {
  CheckPlanInputs(model, o);
  return FloorOf(NormalizedPlanModel(model), AtChunk(o, FloorChunk(o)));
}

MemoryPlan MakePlanAtChunk(const PlanModel& model, int64_t budget, const PlanOptions& o, int64_t chunk) {
  CheckPlanInputs(model, o);
  const PlanModel m = NormalizedPlanModel(model);
  const PlanOptions at = AtChunk(o, std::clamp<int64_t>(chunk, 1, o.context));
  const int64_t floor = FloorOf(m, at);
  if (budget < floor)
    throw Error(kExitBudget, "budget " + FormatBytes(budget) + " is below the floor of " + FormatBytes(floor) +
                                 " for a prefill chunk of " + std::to_string(at.prefill_chunk));
  PlanOptions sized = at;
  if (o.prefix_cache == kPrefixCacheAuto) sized.prefix_cache = PrefixCacheAutoBytes(m.cfg, o.context, budget - floor);
  MemoryPlan p = PlanAt(m, budget, at, sized, floor);
  p.prefill_chunk_cap = p.prefill_chunk_fits = at.prefill_chunk;
  return p;
}

MemoryPlan MakePlan(const PlanModel& model, int64_t budget, const PlanOptions& o) {
  CheckPlanInputs(model, o);
  const PlanModel m = NormalizedPlanModel(model);
  const int64_t cap = ChunkCap(o), lowest = FloorChunk(o);
  const int64_t floor = FloorOf(m, AtChunk(o, lowest));
  if (budget < floor)
    throw Error(kExitBudget, "budget " + FormatBytes(budget) + " is below the floor of " + FormatBytes(floor) + " (" +
                                 std::to_string(floor) + " bytes) for context " + std::to_string(o.context) +
                                 "; raise --budget or lower the context");
  // prefix_cache = auto takes its share of what lies above the floor (the floor counts it as 0),
  // whatever the chunk.
  PlanOptions sized = o;
  if (o.prefix_cache == kPrefixCacheAuto) sized.prefix_cache = PrefixCacheAutoBytes(m.cfg, o.context, budget - floor);
  // The largest chunk up to the cap whose plan fits (the floor grows with the chunk).
  int64_t lo = lowest, hi = cap;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo + 1) / 2;
    if (FloorOf(m, AtChunk(sized, mid)) <= budget) lo = mid;
    else hi = mid - 1;
  }
  const int64_t fits = lo;
  // Candidates: the floor's chunk, powers of two times kFloorChunk between, the largest that
  // fits. The cheapest prompt token + generated token wins; a tie goes to the larger chunk.
  std::vector<int64_t> chunks = {lowest};
  for (int64_t c = kFloorChunk; c < fits; c *= 2)
    if (c > lowest) chunks.push_back(c);
  if (fits > lowest) chunks.push_back(fits);
  MemoryPlan best;
  double best_price = 0;
  for (int64_t c : chunks) {
    MemoryPlan p = PlanAt(m, budget, AtChunk(o, c), AtChunk(sized, c), floor);
    const double price = TokenPairPrice(m, p);
    if (best.prefill_chunk == 0 || price <= best_price) {
      best = std::move(p);
      best_price = price;
    }
  }
  best.prefill_chunk_cap = cap;
  best.prefill_chunk_fits = fits;
  return best;
}

}  // namespace k3::plan
