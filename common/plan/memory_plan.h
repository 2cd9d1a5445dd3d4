// The memory plan (docs/memory-plan.md) as a pure function: one budget apportioned across
// every process and shared region, never exceeding it. Documented in docs/memory-plan.md.
//
// Order of claims: a floor that every run needs (compute state for the requested context,
// scratch, tokenizer tables, per-process overhead, the small model-level tensors pinned, an
// embed-window arena, a ring of 2 trunk slots of the largest streamed layer or lm_head chunk,
// top_k expert slots); then
// whole trunk layers (and lm_head) pinned largest-first; then every remaining byte as expert
// slots; the embedding table is made resident only when every expert already has a slot. A budget below the floor is k3::Error(kExitBudget).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "common/model_config.h"

namespace k3::plan {

// PlanOptions::prefix_cache: size it from the budget (PrefixCacheAutoBytes).
constexpr int64_t kPrefixCacheAuto = -1;

struct PlanOptions {
  int64_t context = 4096;                       // tokens the MLA cache must hold
  int64_t prefill_chunk = 64;                   // prompt tokens per forward chunk (scratch size)
  int ring_slots = 2;                           // trunk ring depth (>= 2: one computing, one reading)
  int64_t tokenizer_bytes = 64ll << 20;         // vocabulary + merge tables
  int64_t process_overhead = 64ll << 20;        // code, heap, ZeroMQ buffers per process (4 processes)
  int64_t lm_head_window = 256ll << 20;         // lm_head chunk when no trunk layer streams
  int64_t embed_window = 16ll << 20;            // embed-window arena when not resident
  int64_t max_pinned_trunk = -1;                // config override: cap on pinned trunk bytes (-1 = none)
  int64_t remote_expert_frames = 0;             // experts in flight from k3-expert-servers (0: none)
  int remote_servers = 0;                       // how many servers share them (the table's note)
  int64_t max_expert_slots = -1;                // --expert-slots: cap below what the budget allows (-1: none)
  int64_t spec_drafts = 0;                      // --spec: drafts per verify pass (0: no rollback region)
  int64_t prefix_cache = 0;                     // compute's prefix-snapshot cache: bytes, 0 off, or kPrefixCacheAuto
};

// --spec: the most drafts one verify pass takes.
constexpr int64_t kMaxSpecDrafts = 16;

// What compute holds to roll back a verify pass of `drafts` drafts (0 for 0; rollback.h): per
// KDA layer the state before the pass (recurrent state + conv windows) and per position of the
// pass its pre-conv q/k/v, recurrence inputs q/k/v/α and β, plus the pass's logits rows. MLA
// needs only a length.
int64_t SpecRollbackBytes(const ModelConfig& cfg, int64_t drafts);

// Bytes one prefix-cache snapshot of a sequence of `positions` ids holds (compute's
// PrefixCache counts exactly this): the ids, every KDA layer's recurrent state and conv
// windows, and every MLA layer's latent rows (normed c + k_pe) of those positions, fp32.
int64_t PrefixSnapshotBytes(const ModelConfig& cfg, int64_t positions);

// prefix_cache = auto: room for two snapshots of a full-context sequence (a shared system
// prompt and a chat's previous turn), but never more than a quarter of what the budget leaves
// above the floor (`headroom`), so the floor is unchanged and the expert slots keep most of the
// rest. 0 at the floor.
int64_t PrefixCacheAutoBytes(const ModelConfig& cfg, int64_t context, int64_t headroom);

// What the model needs, independent of the budget.
struct PlanModel {
  ModelConfig cfg;
  std::vector<int64_t> trunk_bytes;  // per layer: the layer's trunk run (non-expert tensors)
  int64_t expert_bytes = 0;          // one routed expert (six tensors)
  int64_t embed_bytes = 0;           // embed_tokens
  int64_t lm_head_bytes = 0;         // lm_head (+ final norms, read with it)
  // Optional (0 / -1 = derived from the sizes above, assuming the globals are contiguous):
  int64_t small_globals_bytes = 0;   // norm + output_attn_res_* (always pinned)
  int64_t embed_row_bytes = 0;       // one embedding row
  int64_t lm_head_row_bytes = 0;     // one lm_head row
  // Bytes of the pinned globals run ([min, max) of the tensors kept resident, from the shard
  // headers) by (embed resident ? 1 : 0) | (lm_head resident ? 2 : 0).
  int64_t globals_run[4] = {-1, -1, -1, -1};
};

// Builds PlanModel from a config alone, with release dtypes (common/tensor_names.h).
PlanModel PlanModelFromConfig(const ModelConfig& cfg);

struct Region {
  std::string process;  // "compute", "tokenizer", "trunk-reader", "expert-fetcher", "shm"
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
  int64_t overhead = 0;  // all processes
  int64_t tokenizer = 0;
  int64_t remote_frames = 0;  // expert fetcher: expert frames received from the expert servers
  int remote_servers = 0;
  int64_t spec_rollback = 0;  // compute: speculation rollback journal (SpecRollbackBytes; 0 without --spec)
  int64_t prefix_cache = 0;   // compute: prefix-snapshot cache bound (k3-compute --prefix-cache; 0 = off)
  bool prefix_cache_auto = false;  // sized by PrefixCacheAutoBytes
  int64_t prefix_snapshot_bytes = 0;  // one snapshot of a full-context sequence (the region's note)
  // trunk arena
  std::vector<int> pinned_layers;  // ascending layer indices
  int64_t pinned_bytes = 0;        // pinned arena: header page + widened layers + widened globals run
  int ring_slots = 0;
  int64_t ring_slot_bytes = 0;
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
// The smallest budget MakePlan accepts.
int64_t PlanFloor(const PlanModel& model, const PlanOptions& opt = {});

// "8G", "1.5T", "512M", "4096", "32GiB" (binary units) or "auto" (MemAvailable from
// /proc/meminfo). k3::Error(kExitUsage) on anything else.
int64_t ParseBudget(const std::string& text);
std::string FormatBytes(int64_t bytes);
// prefix_cache / --prefix-cache: a size as for the budget ("512M"), "0" or "off", or "auto"
// (kPrefixCacheAuto; refused when !allow_auto). k3::Error(kExitUsage) naming `what` otherwise.
int64_t ParsePrefixCache(const std::string& text, const std::string& what, bool allow_auto);

}  // namespace k3::plan
