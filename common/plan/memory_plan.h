// The memory plan (docs/memory-plan.md) as a pure function: one budget apportioned across
// every process and shared region, never exceeding it. Documented in docs/memory-plan.md.
//
// Order of claims: a floor that every run needs (compute state for the requested context,
// scratch, tokenizer tables, per-process overhead, the small model-level tensors pinned, an
// embed-window arena, a ring of trunk slots (2 of the largest streamed layer, or with trunk
// pieces (docs/trunk-pieces.md) 1 + read_ahead / trunk_piece slots of trunk_piece) or lm_head chunk,
// top_k expert slots); then
// whole trunk layers (and lm_head) pinned largest-first; then every remaining byte as expert
// slots; the embedding table is made resident only when every expert already has a slot. A budget below the floor is k3::Error(kExitBudget).
// The prefill chunk (the scratch's rows) is chosen too: of the chunks whose plan fits, the one
// at which a generated token plus a prompt token read the fewest bytes (read_price.h).
// With --serve, k3-server's threads, connections and held requests are fixed costs like
// compute's state (server_memory.h).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "common/format_bytes.h"
#include "common/model_config.h"
#include "common/plan/byte_sizes.h"
#include "common/plan/compute_state.h"
#include "common/plan/plan_model.h"
#include "common/plan/server_memory.h"
#include "common/plan/trunk_pieces.h"

namespace k3::plan {

// The processes of a run with a tokenizer: the launcher, compute, the trunk reader, the expert
// fetcher and the tokenizer. A run without a tokenizer has one fewer; the plan counts five, and
// a sixth, k3-server, when serving (PlannedProcesses).
constexpr int kPlannedProcesses = 5;
// Private memory (heap, stacks, code and libraries: RssAnon + RssFile) of one process beyond
// its own plan regions. Measured, not guessed: docs/trunk-pieces.md §7 and
// tests/bench/results/2026-12-01-floor-peaks.md (bench_floor_peaks.py, peaks under a hard
// cgroup cap at the floor). The largest peak seen was 15.6 MiB (the launcher, tiny model);
// at real layer geometry with threads = cores the reader, fetcher and launcher peaked at
// 9.3-11.1 MiB. 24 MiB is 1.5x the largest; the file pages (6.5-8.4 MiB of each) are mostly the
// same shared libraries, charged once in a cgroup, which is further margin.
constexpr int64_t kProcessOverheadBytes = 24ll << 20;
// The tokenizer process's tables (vocabulary, merge ranks, added tokens) at the release's
// 163,840 ids, on top of its overhead share: measured with a generated 163,840-id vocabulary
// (ranks up to 16 bytes, 13.6 on average), the whole process peaked at 42.6 MiB private,
// 36.3 MiB of it anon against about 3 MiB for a service without tables, so the tables take
// about 33 MiB. 48 MiB is 1.45x that.
constexpr int64_t kTokenizerTablesBytes = 48ll << 20;

struct PlanOptions {
  int64_t context = 4096;                       // tokens the MLA cache must hold
  // Cap on the prompt tokens per prefill chunk; 0: none but the context. The plan chooses the
  // chunk (MakePlan: the cheapest generated + prompt token that fits), at most this.
  int64_t prefill_chunk = 0;
  bool prompt_logits = false;                   // --perplexity: every prompt row's logits are kept (scratch)
  int ring_slots = 0;                           // trunk ring depth (0: TrunkRingSlots; else >= 2)
  int64_t trunk_piece = kTrunkPieceBytes;       // ring slot size (kTrunkPieceLayer: whole layers)
  int64_t read_ahead = kTrunkReadAhead;         // read ahead of compute when layers stream in pieces
  int64_t tokenizer_bytes = kTokenizerTablesBytes;    // vocabulary + merge tables
  int64_t process_overhead = kProcessOverheadBytes;  // per process, PlannedProcesses of them
  int64_t lm_head_window = 256ll << 20;         // lm_head chunk when no trunk layer streams
  int64_t embed_window = 16ll << 20;            // embed-window arena when not resident
  int64_t max_pinned_trunk = -1;                // config override: cap on pinned trunk bytes (-1 = none)
  int64_t remote_expert_frames = 0;             // experts in flight from k3-expert-servers (0: none)
  int remote_servers = 0;                       // how many servers share them (the table's note)
  int64_t max_expert_slots = -1;                // --expert-slots: cap below what the budget allows (-1: none)
  int64_t spec_drafts = 0;                      // --spec: drafts per verify pass (0: no rollback region)
  int64_t max_batch = 1;                        // --max-batch: sequences compute decodes together (1: no batch-state)
  int64_t prefix_cache = 0;                     // compute's prefix-snapshot cache: bytes, 0 off, or kPrefixCacheAuto
  ServeInputs serve;                            // --serve: k3-server and its options (server_memory.h)
};

// The processes the plan charges kProcessOverheadBytes for: kPlannedProcesses, and k3-server.
inline int PlannedProcesses(const PlanOptions& o) { return kPlannedProcesses + (o.serve.serving ? 1 : 0); }

struct Region {
  std::string process;  // "compute", "tokenizer", "server", "fetcher", "all", "shm"
  std::string region;
  int64_t bytes = 0;
  std::string note;
};

struct MemoryPlan {
  int64_t budget = 0;
  int64_t floor = 0;
  int64_t total = 0;  // sum of regions; <= budget
  // compute
  bool lm_head_resident = false;
  bool embed_resident = false;
  int64_t embed_window_bytes = 0;  // shm embed-window arena (0 when the embedding is resident)
  int64_t embed_window_rows = 0;
  int64_t lm_head_chunk_rows = 0;  // rows per trunk-ring chunk when lm_head streams
  int64_t lm_head_chunks = 0;
  int64_t globals_bytes = 0;       // the globals run pinned in trunk-pinned (unwidened)
  int64_t kda_state = 0;
  int64_t mla_cache = 0;
  int64_t scratch = 0;
  // The prefill chunk (docs/memory-plan.md "Prefill chunk"): what compute runs a prompt in.
  int64_t prefill_chunk = 0;
  int64_t prefill_chunk_cap = 0;   // min(PlanOptions::prefill_chunk or the context, the context)
  int64_t prefill_chunk_fits = 0;  // the largest chunk (up to the cap) whose plan fits the budget
  int64_t scratch_row = 0;         // scratch bytes per chunk row (ScratchRowBytes)
  int64_t overhead = 0;  // all processes
  int64_t tokenizer = 0;
  int64_t remote_frames = 0;  // expert fetcher: expert frames received from the expert servers
  int remote_servers = 0;
  int64_t spec_rollback = 0;  // compute: speculation rollback journal (SpecRollbackBytes; 0 without --spec)
  int64_t batch_state = 0;    // compute: state of the sequences beyond the first (BatchStateBytes; 0 at max_batch 1)
  int64_t prefix_cache = 0;   // compute: prefix-snapshot cache bound (k3-compute --prefix-cache; 0 = off)
  bool prefix_cache_auto = false;  // sized by PrefixCacheAutoBytes
  int64_t prefix_snapshot_bytes = 0;  // one snapshot of a full-context sequence (the region's note)
  int processes = kPlannedProcesses;  // charged process-overhead (PlannedProcesses)
  // k3-server (all zero without --serve)
  bool serving = false;
  int64_t server_http_threads = 0;  // connection threads (ServeHttpThreads)
  int64_t server_max_body = 0;      // max_body_bytes, for the note
  ServerMemory server;
  // trunk arena
  std::vector<int> pinned_layers;  // ascending layer indices
  int64_t pinned_bytes = 0;        // pinned arena: header page + widened layers + widened globals run
  int ring_slots = 0;
  int64_t ring_slot_bytes = 0;
  int64_t trunk_piece = 0;         // the option the ring was sized with (SizeArenas repeats the rule)
  bool trunk_pieced = false;       // some streamed layer is larger than a slot: it streams in pieces
  int64_t ring_bytes = 0;          // ring arena incl. slot-table header (always >= 2 slots)
  // expert arena
  int64_t expert_slots = 0;
  bool expert_slots_capped = false;  // PlanOptions::max_expert_slots lowered expert_slots
  int64_t expert_slot_bytes = 0;
  int64_t expert_arena_bytes = 0;  // incl. slot-table header

  std::vector<Region> regions() const;
  std::string Table() const;  // printable, one region per line, sizes in GiB/MiB
};

// Throws k3::Error(kExitBudget) naming the floor when budget < floor; kExitUsage for bad options.
MemoryPlan MakePlan(const PlanModel& model, int64_t budget, const PlanOptions& opt = {});
// The smallest budget MakePlan accepts: the plan with the floor's chunk, min(cap, kFloorChunk).
int64_t PlanFloor(const PlanModel& model, const PlanOptions& opt = {});

// The prefill chunk the floor is computed with (when the cap allows): a budget at the floor
// still prefills this many tokens per pass.
constexpr int64_t kFloorChunk = 64;

// The plan with the prefill chunk fixed at `chunk` instead of chosen (the choice compares
// these); k3::Error(kExitBudget) when it does not fit.
MemoryPlan MakePlanAtChunk(const PlanModel& model, int64_t budget, const PlanOptions& opt, int64_t chunk);

}  // namespace k3::plan
