#include "common/plan/memory_plan.h"

#include <algorithm>
#include <cctype>
#include <climits>
#include <stdexcept>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <numeric>
#include <sstream>

#include "common/error.h"
#include "common/ipc/slot_table.h"
#include "common/tensor_names.h"
#include "common/plan/head_stream.h"
#include "common/read_window.h"

namespace k3::plan {
namespace {

// One aligned block: the arena header page, and the smallest ring slot.
constexpr int64_t kPage = static_cast<int64_t>(kReadAlign);

int64_t SlotArena(int64_t slots, int64_t slot_bytes) {
  if (slots <= 0) return 0;
  return static_cast<int64_t>(ipc::SlotTable::BytesNeeded(static_cast<uint32_t>(slots), static_cast<uint64_t>(slot_bytes)));
}

// Budget-independent parts of compute + tokenizer + per-process overhead (+ the fetcher's
// frames from an expert server).
struct Fixed {
  int64_t kda_state = 0, mla_cache = 0, scratch = 0, overhead = 0, tokenizer = 0, remote = 0, spec = 0;
  int64_t batch = 0;   // BatchStateBytes
  int64_t prefix = 0;  // prefix-snapshot cache (an explicit size; auto is added by MakePlan)
  int64_t sum() const { return kda_state + mla_cache + scratch + overhead + tokenizer + remote + spec + batch + prefix; }
};

Fixed FixedCosts(const PlanModel& m, const PlanOptions& o) {
  const ModelConfig& c = m.cfg;
  Fixed f;
  const int64_t n_kda = std::count(c.layer_kind.begin(), c.layer_kind.end(), MixerKind::KDA);
  const int64_t n_mla = static_cast<int64_t>(c.layer_kind.size()) - n_kda;
  // KDA: one fp32 [head_dim x head_dim] state per head, plus q/k/v conv windows (K-1 inputs).
  const int64_t proj = c.kda_heads * c.kda_head_dim;
  f.kda_state = n_kda * (c.kda_heads * c.kda_head_dim * c.kda_head_dim * 4 + 3 * proj * (c.conv_kernel - 1) * 4);
  // MLA: the compressed latent (normed c + shared k_pe) per position, fp32.
  f.mla_cache = n_mla * o.context * (c.kv_lora_rank + c.qk_rope_head_dim) * 4;
  // Scratch (estimate, fp32): per prompt-chunk token the residual stream, AttnRes block
  // snapshots, the widest projection and FFN rows; plus one token's attention scores over
  // the whole context and one logits row.
  const int64_t blocks = c.attn_res_block_size > 0 ? c.num_layers / c.attn_res_block_size + 2 : 2;
  const int64_t widest_proj = std::max(proj, c.mla_heads * (c.qk_nope_head_dim + c.qk_rope_head_dim));
  const int64_t widest_ffn = std::max(c.intermediate_size, c.num_shared_experts * c.moe_intermediate_size);
  const int64_t per_token = (blocks + 8) * c.hidden_size + 4 * widest_proj + 3 * widest_ffn;
  // (A verify pass of --spec N runs N+1 positions, like a prompt chunk.)
  const int64_t chunk = std::max(o.prefill_chunk, o.spec_drafts > 0 ? o.spec_drafts + 1 : 0);
  f.scratch = 4 * (chunk * per_token + c.mla_heads * o.context + c.vocab_size);
  f.spec = SpecRollbackBytes(c, o.spec_drafts);
  f.batch = BatchStateBytes(c, o.context, o.max_batch);
  f.overhead = kPlannedProcesses * o.process_overhead;
  f.prefix = std::max<int64_t>(o.prefix_cache, 0);
  f.tokenizer = o.tokenizer_bytes;
  // Each expert in flight from the server sits whole in a ZeroMQ frame until it is copied.
  f.remote = o.remote_expert_frames * m.expert_bytes;
  return f;
}

// Pinning candidates: every trunk layer and lm_head (layer -1), largest first.
struct Candidate {
  int layer;  // -1 = lm_head
  int64_t bytes;
};

// Missing optional model fields derived from the required ones.
PlanModel Normalized(PlanModel m) {
  const int64_t V = std::max<int64_t>(m.cfg.vocab_size, 1);
  if (m.small_globals_bytes <= 0) m.small_globals_bytes = 0;
  m.small_globals_bytes = std::min(m.small_globals_bytes, m.lm_head_bytes);
  const int64_t lm_tensor = m.lm_head_bytes - m.small_globals_bytes;
  if (m.embed_row_bytes <= 0) m.embed_row_bytes = std::max<int64_t>(1, (m.embed_bytes + V - 1) / V);
  if (m.lm_head_row_bytes <= 0) m.lm_head_row_bytes = std::max<int64_t>(1, (lm_tensor + V - 1) / V);
  std::vector<int64_t> mins;
  for (int l = 0; l < static_cast<int>(m.trunk_bytes.size()); ++l) mins.push_back(LayerMinPieceSlot(m, l));
  m.min_piece_slot = mins;
  for (int i = 0; i < 4; ++i)
    if (m.globals_run[i] < 0)
      m.globals_run[i] = m.small_globals_bytes + ((i & 1) ? m.embed_bytes : 0) + ((i & 2) ? lm_tensor : 0);
  return m;
}

struct Layout {
  int64_t pinned = 0, globals = 0, ring = 0, ring_slot = 0, embed_window = 0, embed_rows = 0;
  int ring_slots = 0;
  bool pieced = false;
  int64_t lm_rows = 0, lm_chunks = 0;
  bool lm_pinned = false;
  int64_t trunk_pinned_raw = 0;  // for the max_pinned_trunk cap
};

// The shared-memory layout with the first k candidates pinned; exactly what the launcher
// creates (pinned arena = header page + widened layers + widened globals run).
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
  l.ring_slot = TrunkSlotBytes(widest, min_piece, o.trunk_piece);
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
  l.pieced = l.ring_slot < widest;
  l.ring_slots = TrunkRingSlots(l.ring_slot, widest, o.read_ahead, o.ring_slots);
  l.ring = SlotArena(l.ring_slots, l.ring_slot);
  if (!embed_resident) {
    const int64_t stride = EmbedRowStride(m.embed_row_bytes);
    l.embed_rows = std::clamp<int64_t>(o.embed_window / stride, 1, std::max<int64_t>(V, 1));
    l.embed_window = l.embed_rows * stride;
  }
  return l;
}

}  // namespace

int64_t BatchStateBytes(const ModelConfig& c, int64_t context, int64_t max_batch) {
  if (max_batch <= 1) return 0;
  const int64_t n_kda = std::count(c.layer_kind.begin(), c.layer_kind.end(), MixerKind::KDA);
  const int64_t n_mla = static_cast<int64_t>(c.layer_kind.size()) - n_kda;
  const int64_t proj = c.kda_heads * c.kda_head_dim;
  const int64_t kda = n_kda * (c.kda_heads * c.kda_head_dim * c.kda_head_dim + 3 * proj * std::max<int64_t>(c.conv_kernel - 1, 0));
  const int64_t mla = n_mla * context * (c.kv_lora_rank + c.qk_rope_head_dim);
  // One decode row's activations (as a prompt-chunk token in the scratch estimate, rounded up:
  // residual, a dozen AttnRes snapshots, the widest projections), its scores, its logits.
  const int64_t widest_proj = std::max(proj, c.mla_heads * (c.qk_nope_head_dim + c.qk_rope_head_dim));
  const int64_t widest_ffn = std::max(c.intermediate_size, c.num_shared_experts * c.moe_intermediate_size);
  const int64_t blocks = c.attn_res_block_size > 0 ? c.num_layers / c.attn_res_block_size + 2 : 2;
  const int64_t row = (blocks + 8) * c.hidden_size + 4 * widest_proj + 3 * widest_ffn + c.mla_heads * context + c.vocab_size;
  return 4 * (max_batch - 1) * (kda + mla + row);
}

int64_t SpecRollbackBytes(const ModelConfig& c, int64_t drafts) {
  if (drafts <= 0) return 0;
  const int64_t n_kda = std::count(c.layer_kind.begin(), c.layer_kind.end(), MixerKind::KDA);
  const int64_t proj = c.kda_heads * c.kda_head_dim, T = drafts + 1;
  const int64_t snapshot = c.kda_heads * c.kda_head_dim * c.kda_head_dim + 3 * proj * std::max<int64_t>(c.conv_kernel - 1, 0);
  const int64_t per_position = 7 * proj + c.kda_heads;
  return 4 * (n_kda * (snapshot + T * per_position) + T * c.vocab_size);
}

int64_t LayerMinPieceSlot(const PlanModel& m, int layer) {
  const auto l = static_cast<size_t>(layer);
  const int64_t whole = WidenedBytes(m.trunk_bytes.at(l));
  if (m.min_piece_slot.size() == m.trunk_bytes.size()) return std::min(m.min_piece_slot[l], whole);
  return std::min(MinPieceSlot(ReleasePieceTensors(m.cfg, layer)), whole);
}

int64_t PrefixSnapshotBytes(const ModelConfig& c, int64_t positions) {
  const int64_t n_kda = std::count(c.layer_kind.begin(), c.layer_kind.end(), MixerKind::KDA);
  const int64_t n_mla = static_cast<int64_t>(c.layer_kind.size()) - n_kda;
  const int64_t proj = c.kda_heads * c.kda_head_dim;
  const int64_t kda = c.kda_heads * c.kda_head_dim * c.kda_head_dim + 3 * proj * std::max<int64_t>(c.conv_kernel - 1, 0);
  return 4 * (n_kda * kda + positions * (n_mla * (c.kv_lora_rank + c.qk_rope_head_dim) + 1));
}

int64_t PrefixCacheAutoBytes(const ModelConfig& c, int64_t context, int64_t headroom) {
  return std::clamp<int64_t>(headroom / 4, 0, 2 * PrefixSnapshotBytes(c, context));
}

PlanModel PlanModelFromConfig(const ModelConfig& cfg) {
  PlanModel m;
  m.cfg = cfg;
  for (int l = 0; l < cfg.num_layers; ++l) m.trunk_bytes.push_back(LayerTrunkBytes(cfg, l));
  m.expert_bytes = cfg.expert_bytes();
  auto bytes_of = [&](ModelRole r) {
    int64_t n = DTypeSize(ReleaseDType(r));
    for (int64_t d : ExpectedShape(cfg, r)) n *= d;
    return n;
  };
  m.embed_bytes = bytes_of(ModelRole::kEmbedTokens);
  m.small_globals_bytes = bytes_of(ModelRole::kNorm) + bytes_of(ModelRole::kOutputAttnResNorm) +
                          bytes_of(ModelRole::kOutputAttnResProj);
  m.lm_head_bytes = bytes_of(ModelRole::kLmHead) + m.small_globals_bytes;
  m.embed_row_bytes = DTypeSize(ReleaseDType(ModelRole::kEmbedTokens)) * cfg.hidden_size;
  m.lm_head_row_bytes = DTypeSize(ReleaseDType(ModelRole::kLmHead)) * cfg.hidden_size;
  return m;
}

namespace {

void CheckInputs(const PlanModel& m, const PlanOptions& o) {
  if (o.context < 1 || o.prefill_chunk < 1 || o.ring_slots == 1 || o.ring_slots < 0)
    throw UsageError("memory plan: context and prefill chunk must be >= 1 and ring slots >= 2 (0: from read_ahead)");
  if (o.trunk_piece != kTrunkPieceLayer && o.trunk_piece < kPage)
    throw UsageError("trunk_piece " + std::to_string(o.trunk_piece) + ": must be \"layer\" or at least 4096 bytes");
  if (o.read_ahead < 0) throw UsageError("read_ahead must be >= 0 bytes");
  if (o.prefix_cache < kPrefixCacheAuto)
    throw UsageError("--prefix-cache: a size (e.g. 512M), 0 for off, or auto");
  if (o.spec_drafts < 0 || o.spec_drafts > kMaxSpecDrafts)
    throw UsageError("--spec " + std::to_string(o.spec_drafts) + ": must be 0 to " + std::to_string(kMaxSpecDrafts));
  const ModelConfig& c = m.cfg;
  if (c.max_position_embeddings > 0 && o.context > c.max_position_embeddings)
    throw UsageError("--context " + std::to_string(o.context) + " is more than the model supports (max_position_embeddings " +
                     std::to_string(c.max_position_embeddings) + ")");
  // Bytes per context position and per prompt-chunk token in FixedCosts, bounded so that no
  // product or sum of the plan can overflow: anything near 2^62 bytes is no real machine.
  constexpr int64_t kMaxBytes = int64_t{1} << 62;
  const int64_t per_position = (c.num_layers + 1) * (c.kv_lora_rank + c.qk_rope_head_dim + c.mla_heads) * 4;
  if (per_position > 0 && o.context > kMaxBytes / 4 / per_position)
    throw UsageError("--context " + std::to_string(o.context) + " is too large: the memory plan would need more than 2^62 bytes");
  if (o.max_batch < 1 || o.max_batch > kMaxBatch)
    throw UsageError("--max-batch " + std::to_string(o.max_batch) + ": must be 1 to " + std::to_string(kMaxBatch));
  if (per_position > 0 && o.context > kMaxBytes / 4 / per_position / o.max_batch)
    throw UsageError("--context " + std::to_string(o.context) + " with --max-batch " + std::to_string(o.max_batch) +
                     " is too large: the memory plan would need more than 2^62 bytes");
  const int64_t per_chunk_token = (c.num_layers + 16) * (c.hidden_size + c.kda_heads * c.kda_head_dim +
                                  c.mla_heads * (c.qk_nope_head_dim + c.qk_rope_head_dim) + c.intermediate_size +
                                  c.num_shared_experts * c.moe_intermediate_size) * 16;
  if (per_chunk_token > 0 && o.prefill_chunk > kMaxBytes / 4 / per_chunk_token)
    throw UsageError("--prefill-chunk " + std::to_string(o.prefill_chunk) + " is too large: the memory plan would need more than 2^62 bytes");
  if (static_cast<int64_t>(m.trunk_bytes.size()) != m.cfg.num_layers || m.cfg.num_layers < 1)
    throw UsageError("memory plan: need one trunk size per layer (" + std::to_string(m.cfg.num_layers) + ")");
  if (static_cast<int64_t>(m.cfg.layer_kind.size()) != m.cfg.num_layers)
    throw UsageError("memory plan: layer kinds do not match the layer count");
  if (o.max_expert_slots >= 0 && o.max_expert_slots < m.cfg.top_k)
    throw UsageError("--expert-slots " + std::to_string(o.max_expert_slots) + " is below the " +
                     std::to_string(m.cfg.top_k) + " slots the expert fetcher needs (top_k: one token's experts at once)");
  if (m.expert_bytes <= 0 || m.cfg.top_k < 1 || m.embed_bytes < 0 || m.lm_head_bytes < 0 || m.cfg.vocab_size < 1)
    throw UsageError("memory plan: expert bytes, top_k and the vocabulary must be positive");
  for (int64_t b : m.trunk_bytes)
    if (b <= 0) throw UsageError("memory plan: every layer needs a positive trunk size");
}

std::vector<Candidate> Candidates(const PlanModel& m) {
  std::vector<Candidate> c;
  c.push_back({-1, m.lm_head_bytes});
  for (int l = 0; l < static_cast<int>(m.trunk_bytes.size()); ++l) c.push_back({l, m.trunk_bytes[l]});
  std::stable_sort(c.begin(), c.end(), [](const Candidate& a, const Candidate& b) { return a.bytes > b.bytes; });
  return c;
}

int64_t Shm(const Layout& l) { return l.pinned + l.ring + l.embed_window; }

// Everything except expert slots beyond top_k, with the first k candidates pinned.
int64_t Required(const PlanModel& m, const std::vector<Candidate>& cands, size_t k, const PlanOptions& o,
                 const Fixed& f, int64_t min_experts_arena) {
  return f.sum() + Shm(LayoutFor(m, cands, k, o, false)) + min_experts_arena;
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

}  // namespace

int64_t PlanFloor(const PlanModel& model, const PlanOptions& o) {
  CheckInputs(model, o);
  return FloorOf(Normalized(model), o);
}

MemoryPlan MakePlan(const PlanModel& model, int64_t budget, const PlanOptions& o) {
  CheckInputs(model, o);
  const PlanModel m = Normalized(model);
  const int64_t floor = FloorOf(m, o);
  if (budget < floor)
    throw Error(kExitBudget, "budget " + FormatBytes(budget) + " is below the floor of " + FormatBytes(floor) + " (" +
                                 std::to_string(floor) + " bytes) for context " + std::to_string(o.context) +
                                 "; raise --budget or lower the context");
  const auto cands = Candidates(m);
  // prefix_cache = auto takes its share of what lies above the floor (the floor counts it as 0).
  PlanOptions sized = o;
  if (o.prefix_cache == kPrefixCacheAuto) sized.prefix_cache = PrefixCacheAutoBytes(m.cfg, o.context, budget - floor);
  const Fixed f = FixedCosts(m, sized);
  // The fetcher reads an expert's run widened to 4096 bounds straight into its slot.
  const int64_t expert_slot = WidenedBytes(m.expert_bytes);
  const int64_t min_experts = SlotArena(m.cfg.top_k, expert_slot);

  // Largest prefix of candidates that fits (feasibility is monotone in the budget for each
  // k, so more budget never pins fewer layers).
  size_t k = 0;
  for (size_t i = 0; i <= cands.size(); ++i)
    if (WithinCap(m, cands, i, o) && Required(m, cands, i, o, f, min_experts) <= budget) k = i;

  MemoryPlan p;
  p.budget = budget;
  p.floor = floor;
  for (size_t i = 0; i < k; ++i) {
    if (cands[i].layer < 0) p.lm_head_resident = true;
    else p.pinned_layers.push_back(cands[i].layer);
  }
  std::sort(p.pinned_layers.begin(), p.pinned_layers.end());
  p.kda_state = f.kda_state;
  p.mla_cache = f.mla_cache;
  p.scratch = f.scratch;
  p.overhead = f.overhead;
  p.tokenizer = f.tokenizer;
  p.remote_frames = f.remote;
  p.remote_servers = o.remote_servers;
  p.spec_rollback = f.spec;
  p.batch_state = f.batch;
  p.prefix_cache = f.prefix;
  p.prefix_cache_auto = o.prefix_cache == kPrefixCacheAuto;
  p.prefix_snapshot_bytes = PrefixSnapshotBytes(m.cfg, o.context);
  Layout l = LayoutFor(m, cands, k, o, false);
  int64_t used = f.sum() + Shm(l);
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
    const int64_t used_r = f.sum() + Shm(r);
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

std::vector<Region> MemoryPlan::regions() const {
  const std::string globals = "globals " + FormatBytes(globals_bytes) +
                              (embed_resident ? " incl. embedding" : "") + (lm_head_resident ? " incl. lm_head" : "");
  std::vector<Region> r = {
      {"compute", "kda-state", kda_state, "recurrent + conv state, fp32"},
      {"compute", "mla-cache", mla_cache, "latent cache, fp32"},
      {"compute", "scratch", scratch, "activations (estimate)"},
      {"tokenizer", "tables", tokenizer, ""},
      {"all", "process-overhead", overhead, std::to_string(kPlannedProcesses) + " processes"},
      {"shm", "trunk-pinned", pinned_bytes, std::to_string(pinned_layers.size()) + " layers + " + globals},
      {"shm", "trunk-ring", ring_bytes,
       std::to_string(ring_slots) + " slots x " + FormatBytes(ring_slot_bytes) +
           (trunk_pieced ? "; layers in pieces" : "") +
           (lm_head_resident ? "" : "; lm_head in " + std::to_string(lm_head_chunks) + " chunks of " +
                                        std::to_string(lm_head_chunk_rows) + " rows")},
      {"shm", "embed-window", embed_window_bytes,
       embed_resident ? "embedding resident in trunk-pinned" : std::to_string(embed_window_rows) + " rows"},
      {"shm", "experts", expert_arena_bytes,
       std::to_string(expert_slots) + " slots x " + FormatBytes(expert_slot_bytes)},
  };
  if (spec_rollback > 0)
    r.insert(r.begin() + 2, {"compute", "spec-rollback", spec_rollback, "speculation: state before a verify pass + its inputs"});
  if (batch_state > 0)
    r.insert(r.begin() + 2, {"compute", "batch-state", batch_state, "KDA state + MLA cache + a decode row per sequence beyond the first"});
  if (prefix_cache > 0 || prefix_cache_auto) {
    char note[160];
    std::snprintf(note, sizeof note, "prefix snapshots%s; %.1f of a full-context one (%s)", prefix_cache_auto ? " (auto)" : "",
                  prefix_snapshot_bytes > 0 ? static_cast<double>(prefix_cache) / static_cast<double>(prefix_snapshot_bytes) : 0.0,
                  FormatBytes(prefix_snapshot_bytes).c_str());
    r.insert(r.begin() + 2 + (spec_rollback > 0) + (batch_state > 0), {"compute", "prefix-cache", prefix_cache, note});
  }
  if (remote_frames > 0)
    r.push_back({"fetcher", "remote-frames", remote_frames,
                 remote_servers > 1 ? "experts in flight from " + std::to_string(remote_servers) + " expert servers"
                                    : "experts in flight from the expert server"});
  return r;
}

std::string MemoryPlan::Table() const {
  std::ostringstream out;
  char line[200];
  std::snprintf(line, sizeof line, "%-10s %-17s %12s  %s\n", "process", "region", "bytes", "note");
  out << line;
  for (const Region& r : regions()) {
    std::snprintf(line, sizeof line, "%-10s %-17s %12s  %s\n", r.process.c_str(), r.region.c_str(),
                  FormatBytes(r.bytes).c_str(), r.note.c_str());
    out << line;
  }
  std::snprintf(line, sizeof line, "%-28s %12s  (budget %s, floor %s)\n", "total", FormatBytes(total).c_str(),
                FormatBytes(budget).c_str(), FormatBytes(floor).c_str());
  out << line;
  return out.str();
}

int64_t ParseTrunkPiece(const std::string& text) {
  if (text == "layer") return kTrunkPieceLayer;
  int64_t v = 0;
  try {
    v = text == "auto" ? -1 : ParseBudget(text);
  } catch (const Error&) {
    v = -1;
  }
  if (v < kPage) throw UsageError("trunk_piece (--trunk-piece) '" + text + "': must be \"layer\" or a size of at least 4096 bytes (64M, 1G)");
  return v;
}

int64_t ParsePrefixCache(const std::string& text, const std::string& what, bool allow_auto) {
  if (text == "0" || text == "off") return 0;
  if (text == "auto") {
    if (allow_auto) return kPrefixCacheAuto;
    throw UsageError(what + " auto: give a size (e.g. 512M) or 0");
  }
  try {
    return ParseBudget(text);
  } catch (const Error&) {
    throw UsageError(what + ": bad size '" + text + "' (expected e.g. 512M, 2G, 0 for off" + (allow_auto ? ", or auto)" : ")"));
  }
}

int64_t ParseBudget(const std::string& text) {
  if (text == "auto") {
    std::ifstream in("/proc/meminfo");
    std::string key;
    int64_t kb = 0;
    std::string unit;
    while (in >> key >> kb >> unit)
      if (key == "MemAvailable:") return kb * 1024;
    throw RuntimeFailure("--budget auto: MemAvailable not found in /proc/meminfo");
  }
  const auto bad = [&] { return UsageError("bad size '" + text + "' (expected e.g. 32G, 512M, 1.5T or auto)"); };
  size_t pos = 0;
  while (pos < text.size() && (std::isdigit(static_cast<unsigned char>(text[pos])) || text[pos] == '.')) ++pos;
  if (pos == 0) throw bad();
  double value = 0;
  try {
    size_t used = 0;
    value = std::stod(text.substr(0, pos), &used);
    if (used != pos) throw bad();
  } catch (const std::logic_error&) {
    throw bad();
  }
  std::string unit = text.substr(pos);
  for (auto& ch : unit) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  if (unit.size() >= 2 && unit.substr(unit.size() - 2) == "IB") unit.resize(unit.size() - 2);
  else if (unit.size() == 2 && unit[1] == 'B') unit.resize(1);
  double mult = 1;
  if (unit == "K") mult = 1ll << 10;
  else if (unit == "M") mult = 1ll << 20;
  else if (unit == "G") mult = 1ll << 30;
  else if (unit == "T") mult = 1ll << 40;
  else if (!unit.empty() && unit != "B") throw bad();
  const double bytes = value * mult;
  if (!(bytes >= 1) || bytes > 9.0e18) throw bad();
  return static_cast<int64_t>(bytes);
}

}  // namespace k3::plan
