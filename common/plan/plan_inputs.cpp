#include "common/plan/plan_inputs.h"

#include <string>

#include "common/error.h"
#include "common/plan/shm_layout.h"

namespace k3::plan {
namespace {

// The serve options' ranges (as k3-launch checks them) and the bound that keeps
// ServerBytes' products below `max_bytes`.
void CheckServeInputs(const PlanOptions& o, int64_t max_bytes) {
  const ServeInputs& s = o.serve;
  if (s.http_threads < 0 || s.http_threads > kMaxHttpThreads)
    throw UsageError("--http-threads " + std::to_string(s.http_threads) + ": must be 0 (automatic) to " +
                     std::to_string(kMaxHttpThreads));
  if (s.queue_size < 0 || s.queue_size > kMaxQueueSize)
    throw UsageError("--queue-size " + std::to_string(s.queue_size) + ": must be 0 to " + std::to_string(kMaxQueueSize));
  const int64_t http = ServeHttpThreads(s.http_threads, o.max_batch, s.queue_size);
  if (s.max_body_bytes < kMinBodyBytes || s.max_body_bytes > max_bytes / kServerBodyFactor / http)
    throw UsageError("--max-body-bytes " + std::to_string(s.max_body_bytes) + ": must be at least " +
                     std::to_string(kMinBodyBytes) + " and small enough that the memory plan stays below 2^62 bytes");
  if (o.context > max_bytes / kServerPositionBytes / http)
    throw UsageError("--context " + std::to_string(o.context) + " with --serve is too large: the memory plan would need more than 2^62 bytes");
}

}  // namespace

void CheckPlanInputs(const PlanModel& m, const PlanOptions& o) {
  if (o.context < 1 || o.prefill_chunk < 0 || o.ring_slots == 1 || o.ring_slots < 0)
    throw UsageError("memory plan: context must be >= 1, the prefill chunk cap >= 0 (0: the context) and ring slots >= 2 (0: from read_ahead)");
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
  if (o.serve.serving) CheckServeInputs(o, kMaxBytes);
}

}  // namespace k3::plan
