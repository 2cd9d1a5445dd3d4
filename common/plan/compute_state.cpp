#include "common/plan/compute_state.h"

#include <algorithm>

namespace k3::plan {
namespace {

int64_t KdaLayers(const ModelConfig& c) { return std::count(c.layer_kind.begin(), c.layer_kind.end(), MixerKind::KDA); }
int64_t MlaLayers(const ModelConfig& c) { return static_cast<int64_t>(c.layer_kind.size()) - KdaLayers(c); }
int64_t KdaProj(const ModelConfig& c) { return c.kda_heads * c.kda_head_dim; }

// One KDA layer's state in floats: the recurrent state per head and the q/k/v conv windows.
int64_t KdaLayerFloats(const ModelConfig& c) {
  return c.kda_heads * c.kda_head_dim * c.kda_head_dim + 3 * KdaProj(c) * std::max<int64_t>(c.conv_kernel - 1, 0);
}

// One token's activations in floats: the residual stream, the AttnRes block snapshots, the
// widest projection and FFN rows.
int64_t TokenFloats(const ModelConfig& c) {
  const int64_t blocks = c.attn_res_block_size > 0 ? c.num_layers / c.attn_res_block_size + 2 : 2;
  const int64_t widest_proj = std::max(KdaProj(c), c.mla_heads * (c.qk_nope_head_dim + c.qk_rope_head_dim));
  const int64_t widest_ffn = std::max(c.intermediate_size, c.num_shared_experts * c.moe_intermediate_size);
  return (blocks + 8) * c.hidden_size + 4 * widest_proj + 3 * widest_ffn;
}

}  // namespace

int64_t KdaStateBytes(const ModelConfig& c) {
  const int64_t proj = KdaProj(c);
  return KdaLayers(c) * (c.kda_heads * c.kda_head_dim * c.kda_head_dim * 4 + 3 * proj * (c.conv_kernel - 1) * 4);
}

int64_t MlaCacheBytes(const ModelConfig& c, int64_t context) {
  return MlaLayers(c) * context * (c.kv_lora_rank + c.qk_rope_head_dim) * 4;
}

int64_t ScratchBytes(const ModelConfig& c, int64_t context, int64_t prefill_chunk, int64_t spec_drafts) {
  const int64_t chunk = std::max(prefill_chunk, spec_drafts > 0 ? spec_drafts + 1 : 0);
  return 4 * (chunk * TokenFloats(c) + c.mla_heads * context + c.vocab_size);
}

int64_t BatchStateBytes(const ModelConfig& c, int64_t context, int64_t max_batch) {
  if (max_batch <= 1) return 0;
  const int64_t mla = MlaLayers(c) * context * (c.kv_lora_rank + c.qk_rope_head_dim);
  const int64_t row = TokenFloats(c) + c.mla_heads * context + c.vocab_size;
  return 4 * (max_batch - 1) * (KdaLayers(c) * KdaLayerFloats(c) + mla + row);
}

int64_t SpecRollbackBytes(const ModelConfig& c, int64_t drafts) {
  if (drafts <= 0) return 0;
  const int64_t T = drafts + 1;
  const int64_t per_position = 7 * KdaProj(c) + c.kda_heads;
  return 4 * (KdaLayers(c) * (KdaLayerFloats(c) + T * per_position) + T * c.vocab_size);
}

int64_t PrefixSnapshotBytes(const ModelConfig& c, int64_t positions) {
  return 4 * (KdaLayers(c) * KdaLayerFloats(c) + positions * (MlaLayers(c) * (c.kv_lora_rank + c.qk_rope_head_dim) + 1));
}

int64_t PrefixCacheAutoBytes(const ModelConfig& c, int64_t context, int64_t headroom) {
  return std::clamp<int64_t>(headroom / 4, 0, 2 * PrefixSnapshotBytes(c, context));
}

}  // namespace k3::plan
