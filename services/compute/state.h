// Per-sequence state carried between forward calls (docs/model.md, "Sequence state"): the KDA recurrent state
// and short-conv windows, and the MLA latent cache (normalised c + shared k_pe per position).
// AttnRes carries nothing across tokens.
#pragma once
#include <cstdint>
#include <vector>

#include "common/model_config.h"

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

  // Room for `positions` rows in every MLA cache up front, so the cache never reallocates
  // (a reallocation holds the old and the new buffer at once) and its size is the plan's
  // mla-cache region exactly. Rows already there stay; a smaller reserve is a no-op.
  void ReserveContext(const ModelConfig& cfg, int64_t positions) {
    for (size_t l = 0; l < mla.size(); ++l) {
      if (cfg.layer_kind[l] != MixerKind::MLA) continue;
      mla[l].c.reserve(static_cast<size_t>(positions * cfg.kv_lora_rank));
      mla[l].kpe.reserve(static_cast<size_t>(positions * cfg.qk_rope_head_dim));
    }
  }
};

}  // namespace k3::compute
