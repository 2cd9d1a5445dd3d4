// The language-model part of a K3 config.json (the released nested layout: top level is the
// VL wrapper, the model lives under text_config). Parsing validates every field the engine
// uses and refuses anything it does not implement, naming the field (docs/model.md, "Configuration fields").
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace k3 {

enum class MixerKind { KDA, MLA };

struct ModelConfig {
  // trunk
  int64_t hidden_size = 0;
  int64_t num_layers = 0;
  int64_t vocab_size = 0;
  double rms_norm_eps = 0;
  double situ_beta = 0;         // activation_situ_beta (gate cap)
  double situ_linear_beta = 0;  // activation_situ_linear_beta (up cap); <= 0 means uncapped
  bool situ_linear_capped = true;
  int64_t intermediate_size = 0;    // dense FFN width (layers < first_k_dense_replace)
  int64_t first_k_dense_replace = 0;
  int64_t attn_res_block_size = 0;
  // MLA
  int64_t mla_heads = 0;            // num_attention_heads (== num_key_value_heads)
  int64_t q_lora_rank = 0;
  int64_t kv_lora_rank = 0;
  int64_t qk_nope_head_dim = 0;
  int64_t qk_rope_head_dim = 0;
  int64_t v_head_dim = 0;
  // Epsilon of q_a_layernorm / kv_a_layernorm: not in config.json; the HF remote code uses the
  // RMSNorm class default 1e-6 (docs/model.md, "Where sources disagree"). Overridable for experiments.
  double mla_norm_eps = 1e-6;
  // KDA (linear_attn_config)
  int64_t kda_heads = 0;
  int64_t kda_head_dim = 0;
  int64_t conv_kernel = 0;
  double gate_lower_bound = 0;
  std::vector<MixerKind> layer_kind;  // per 0-based layer, from kda_layers / full_attn_layers
  // MoE
  int64_t num_experts = 0;
  int64_t top_k = 0;
  int64_t num_shared_experts = 0;
  int64_t moe_intermediate_size = 0;  // routed expert width, and per-shared-expert width
  int64_t latent_size = 0;            // routed_expert_hidden_size
  bool moe_renormalize = true;
  double routed_scaling_factor = 1.0;
  // MXFP4 group size from quantization_config (32 in the release)
  int64_t mxfp4_group = 32;
  // A run option, not read from config.json: round the routed experts' inputs to bf16 before
  // their MXFP4 products (--expert-inputs bf16), as the official bf16 reference feeds them.
  // Default false: exact f32 inputs.
  bool expert_inputs_bf16 = false;
  // Longest context the model supports (max_position_embeddings; 0 when the config has none).
  int64_t max_position_embeddings = 0;
  // special ids (top level, falling back to text_config)
  int64_t bos_token_id = -1;
  int64_t eos_token_id = -1;              // the first of eos_token_ids
  std::vector<int64_t> eos_token_ids;     // config.json's eos_token_id: one id or a list
  int64_t pad_token_id = -1;

  // ---- derived geometry ----
  bool is_dense(int64_t layer) const { return layer < first_k_dense_replace; }
  // Routed experts: layers [first_k_dense_replace, num_layers) x experts [0, num_experts).
  int64_t moe_layers() const { return num_layers > first_k_dense_replace ? num_layers - first_k_dense_replace : 0; }
  int64_t routed_expert_count() const { return moe_layers() * num_experts; }
  bool has_routed_expert(int64_t layer, int64_t expert) const {
    return layer >= first_k_dense_replace && layer < num_layers && expert >= 0 && expert < num_experts;
  }
  bool is_block_start(int64_t layer) const { return layer % attn_res_block_size == 0; }
  int64_t kda_proj() const { return kda_heads * kda_head_dim; }
  int64_t mla_q_head() const { return qk_nope_head_dim + qk_rope_head_dim; }
  int64_t shared_width() const { return num_shared_experts * moe_intermediate_size; }
  // Bytes of one routed expert's six tensors (w1,w3: [I, L]; w2: [L, I]; packed + E8M0 scales).
  int64_t expert_bytes() const;
  int64_t num_kda_layers() const;
  int64_t num_mla_layers() const;
};

// Parses config.json text (nested release layout; a flat text_config-only object is also
// accepted). Throws k3::Error(kExitBadModel) with a one-line message naming the file and field.
ModelConfig ParseModelConfig(const std::string& json_text, const std::string& path_for_errors);
ModelConfig LoadModelConfig(const std::string& path);

}  // namespace k3
