// Per-sequence state carried between forward calls (docs/model.md, "Sequence state"): the KDA recurrent state
// and short-conv windows, and the MLA latent cache (normalised c + shared k_pe per position).
// AttnRes carries nothing across tokens.
#pragma once
#include <cstdint>
#include <vector>

#include "../../common/model_config.h"

namespace k3::compute {

struct KdaState {
  std::vector<float> S;                       // [heads][D key][D value], fp32
  std::vector<float> conv_q, conv_k, conv_v;  // [P][K-1], oldest first (pre-conv inputs)
};

struct MlaCache {
  std::vector<float> c;    // [len][kv_lora] normalised latent
  std::vector<float> kpe;  // [len][rope] shared key slot, never rotated
  int64_t len = 0;
};

struct SequenceState {
  std::vector<KdaState> kda;  // indexed by layer; empty for MLA layers
  std::vector<MlaCache> mla;  // indexed by layer; empty for KDA layers
  int64_t position = 0;       // tokens consumed so far

  // Zeroes everything (a fresh sequence).
  void Reset(const ModelConfig& cfg) {
    const size_t n = static_cast<size_t>(cfg.num_layers);
    kda.assign(n, KdaState{});
    mla.assign(n, MlaCache{});
    const size_t P = static_cast<size_t>(cfg.kda_proj());
    const size_t D = static_cast<size_t>(cfg.kda_head_dim);
    const size_t W = static_cast<size_t>(cfg.conv_kernel > 0 ? cfg.conv_kernel - 1 : 0);
    for (size_t l = 0; l < n; ++l) {
      if (cfg.layer_kind[l] != MixerKind::KDA) continue;
      kda[l].S.assign(static_cast<size_t>(cfg.kda_heads) * D * D, 0.0f);
      kda[l].conv_q.assign(P * W, 0.0f);
      kda[l].conv_k.assign(P * W, 0.0f);
      kda[l].conv_v.assign(P * W, 0.0f);
    }
    position = 0;
  }
};

}  // namespace k3::compute
