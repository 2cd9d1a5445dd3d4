// The small model config the prefix cache and prefix store tests share: three layers KDA, MLA,
// KDA; 2 KDA heads of dim 4 (proj 8), conv kernel 4 (windows of 3), MLA latent 8 + rope 2,
// vocabulary 1000.
#pragma once
#include "common/model_config.h"

namespace k3::compute::fixtures {

inline ModelConfig SmallConfig() {
  ModelConfig c;
  c.num_layers = 3;
  c.layer_kind = {MixerKind::KDA, MixerKind::MLA, MixerKind::KDA};
  c.kda_heads = 2;
  c.kda_head_dim = 4;
  c.conv_kernel = 4;
  c.kv_lora_rank = 8;
  c.qk_rope_head_dim = 2;
  c.vocab_size = 1000;
  return c;
}

}  // namespace k3::compute::fixtures
