#include "common/plan/compute_state.h"

#include <algorithm>

#include "common/row_tile.h"

namespace k3::plan {
namespace {

int64_t KdaLayers(const ModelConfig& c) { return std::count(c.layer_kind.begin(), c.layer_kind.end(), MixerKind::KDA); }
int64_t MlaLayers(const ModelConfig& c) { return static_cast<int64_t>(c.layer_kind.size()) - KdaLayers(c); }
int64_t KdaProj(const ModelConfig& c) { return c.kda_heads * c.kda_head_dim; }

// One KDA layer's state in floats: the recurrent state per head and the q/k/v conv windows.
int64_t KdaLayerFloats(const ModelConfig& c) {
  return c.kda_heads * c.kda_head_dim * c.kda_head_dim + 3 * KdaProj(c) * std::max<int64_t>(c.conv_kernel - 1, 0);
}

// The floats one row of a pass (a prompt-chunk token, a verify-pass position or a decode row)
// holds at the pass's peak, from the buffers services/compute allocates per row:
// - forward.cpp, for the whole pass: the running sum, the AttnRes block snapshots (one per
//   block started), a, x and o: (blocks + 4)·H; the row's id and top-k ids (int32): 1 + K;
// - plus the largest of what one layer adds while it runs:
//   KDA (kda.cpp): q, k, v, gate, z, y: 6·P; f_a: D; β: heads;
//   MLA (mla.cpp): cq; q; ckv; attn and gate; row_seq and row_pos (int64): 4;
//   dense FFN (ffn.cpp): a and b: 2·I;
//   MoE (ffn.cpp): router logits E; weights and ids 2K; the (token, rank) slots (int64) 2K;
//   xl L; shared H; then the shared experts' a and b (2·shared width) or, later, the expert
//   outputs per (token, rank) and their sum: K·L + L.
// Buffers of a fixed number of rows (kRowTile) are in TileFloats; per-thread ones in
// ScratchBytes.
int64_t RowFloats(const ModelConfig& c) {
  const int64_t H = c.hidden_size, K = c.top_k;
  const int64_t blocks = c.attn_res_block_size > 0 ? (c.num_layers + c.attn_res_block_size - 1) / c.attn_res_block_size : 1;
  const int64_t pass = (blocks + 4) * H + 1 + K;
  const int64_t kda = c.kda_heads > 0 ? 6 * KdaProj(c) + c.kda_head_dim + c.kda_heads : 0;
  const int64_t mla = c.q_lora_rank + c.mla_heads * (c.qk_nope_head_dim + c.qk_rope_head_dim) + c.kv_lora_rank +
                      c.qk_rope_head_dim + 2 * c.mla_heads * c.v_head_dim + 4;
  const int64_t dense = c.first_k_dense_replace > 0 ? 2 * c.intermediate_size : 0;
  const int64_t L = c.latent_size > 0 ? c.latent_size : H;
  const int64_t moe = c.moe_layers() > 0 ? c.num_experts + 4 * K + L + H + std::max(2 * c.shared_width(), K * L + L) : 0;
  return pass + std::max({kda, mla, dense, moe});
}

// Buffers of at most kRowTile rows (common/row_tile.h): a bf16 product's split x (its widest
// input, padded to 32), a piece's block output (its widest output), and a routed expert's rows
// (x, the two up products, y) with the kernel's laid-out x.
int64_t TileFloats(const ModelConfig& c) {
  const int64_t L = c.latent_size > 0 ? c.latent_size : c.hidden_size;
  const int64_t widest_in = std::max({c.hidden_size, c.intermediate_size, KdaProj(c), c.mla_heads * c.v_head_dim,
                                      c.q_lora_rank, L, c.shared_width()});
  const int64_t widest_out = std::max({widest_in, c.mla_heads * (c.qk_nope_head_dim + c.qk_rope_head_dim),
                                       c.kv_lora_rank + c.qk_rope_head_dim, c.num_experts});
  const int64_t expert = 2 * L + 2 * c.moe_intermediate_size + std::max(L, c.moe_intermediate_size);
  return kRowTile * (widest_in + 32 + widest_out + expert);
}

}  // namespace

int64_t KdaStateBytes(const ModelConfig& c) {
  const int64_t proj = KdaProj(c);
  return KdaLayers(c) * (c.kda_heads * c.kda_head_dim * c.kda_head_dim * 4 + 3 * proj * (c.conv_kernel - 1) * 4);
}

int64_t MlaCacheBytes(const ModelConfig& c, int64_t context) {
  return MlaLayers(c) * context * (c.kv_lora_rank + c.qk_rope_head_dim) * 4;
}

int64_t ScratchRowBytes(const ModelConfig& c, bool prompt_logits) {
  // Kept prompt logits: the row's logits, its final activations for the head, and a streamed
  // lm_head chunk's product.
  return 4 * (RowFloats(c) + (prompt_logits ? 2 * c.vocab_size + c.hidden_size : 0));
}

int64_t ScratchBytes(const ModelConfig& c, int64_t context, int64_t prefill_chunk, int64_t spec_drafts,
                     bool prompt_logits) {
  const int64_t rows = std::max(prefill_chunk, spec_drafts > 0 ? spec_drafts + 1 : 0);
  // Per thread of MLA's attention (one (token, head) pair each): the scores over the context
  // and the latent mix, at most heads of them; one logits row.
  const int64_t attention = c.mla_heads * (context + 4 * c.kv_lora_rank);
  return rows * ScratchRowBytes(c, prompt_logits) + 4 * (TileFloats(c) + attention + c.vocab_size);
}

int64_t BatchStateBytes(const ModelConfig& c, int64_t context, int64_t max_batch) {
  if (max_batch <= 1) return 0;
  const int64_t mla = MlaLayers(c) * context * (c.kv_lora_rank + c.qk_rope_head_dim);
  const int64_t row = RowFloats(c) + c.mla_heads * context + c.vocab_size;
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
