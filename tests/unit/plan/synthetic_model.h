// What the memory-plan and arena-size tests share: the dimensions of a small synthetic model
// and the read-window widening written out independently of common/read_window.h, so the tests
// check the code's arithmetic instead of repeating it.
#pragma once
#include <cstdint>

#include "common/model_config.h"
#include "common/plan/memory_plan.h"

namespace k3::synthetic {

constexpr int64_t kMiB = 1ll << 20;
constexpr int64_t kGiB = 1ll << 30;

// A run of `b` bytes at any offset, widened to 4096-aligned bounds.
inline int64_t Widened(int64_t b) { return (b + 4095) / 4096 * 4096 + 4096; }

// `layers` layers, every `mla_every`-th of them MLA (the rest KDA; attention-residual blocks of
// that size), 16 routed experts (top 4) and one shared, small dimensions.
inline ModelConfig SyntheticConfig(int layers, int mla_every) {
  ModelConfig c;
  c.hidden_size = 256;
  c.num_layers = layers;
  c.vocab_size = 1000;
  c.intermediate_size = 512;
  c.first_k_dense_replace = 1;
  c.attn_res_block_size = mla_every;
  c.mla_heads = 4;
  c.kv_lora_rank = 64;
  c.qk_nope_head_dim = 32;
  c.qk_rope_head_dim = 16;
  c.v_head_dim = 32;
  c.kda_heads = 4;
  c.kda_head_dim = 32;
  c.conv_kernel = 4;
  c.num_experts = 16;
  c.top_k = 4;
  c.num_shared_experts = 1;
  c.moe_intermediate_size = 128;
  for (int l = 0; l < layers; ++l)
    c.layer_kind.push_back(l % mla_every == mla_every - 1 ? MixerKind::MLA : MixerKind::KDA);
  return c;
}

// SyntheticConfig(8, 4) with trunk layers of uneven sizes (a large dense layer 0, two small MLA
// layers), 3 MiB experts and 30 MiB embedding and lm_head: the plan tests' model.
inline plan::PlanModel SyntheticPlanModel() {
  plan::PlanModel m;
  m.cfg = SyntheticConfig(8, 4);
  m.trunk_bytes = {90 * kMiB, 40 * kMiB, 40 * kMiB, 25 * kMiB, 40 * kMiB, 40 * kMiB, 41 * kMiB, 26 * kMiB};
  m.expert_bytes = 3 * kMiB + 100;
  m.embed_bytes = 30 * kMiB;
  m.lm_head_bytes = 30 * kMiB;
  return m;
}

}  // namespace k3::synthetic
