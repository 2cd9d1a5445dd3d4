// Bound weights of one layer / the model head: big matrices are kern::DenseMat views into
// wherever the bytes live (mmap in standalone, shared memory in the pipeline); small vectors
// are widened to float at bind time. Binding checks dtype and shape against the config and
// throws k3::Error(kExitBadModel) naming the tensor (docs/model.md, "Tensor names").
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/model_config.h"
#include "common/safetensors.h"
#include "common/tensor_names.h"
#include "kernels/matmul.h"

namespace k3::compute {

class LayerSource;
// Set by a source whose layer arrives in pieces (docs/trunk-pieces.md): the big matrices are
// then shapes only, and every product on them goes through src->Apply (sources.h TrunkMatmul).
// Unset (standalone, pinned and whole-layer slots): the views hold the bytes.
struct TrunkRef {
  LayerSource* src = nullptr;
  int64_t layer = -1;
};

// Where a tensor's bytes are: `data` points at info->nbytes bytes.
struct RawTensor {
  const void* data = nullptr;
  const TensorInfo* info = nullptr;
};
// Looks a tensor up by its full checkpoint name; throws BadModel when it is absent.
using TensorResolver = std::function<RawTensor(const std::string& name)>;

struct FfnWeights {  // SiTU-GLU MLP: down · SiTU(gate x, up x)
  kern::DenseMat gate, up, down;
  TensorRole gate_role = TensorRole::kDenseGateProj, up_role = TensorRole::kDenseUpProj,
             down_role = TensorRole::kDenseDownProj;  // the shared experts' roles in a MoE layer
  TrunkRef trunk;
};

struct KdaWeights {
  kern::DenseMat q, k, v, f_a, f_b, b, g, o;
  std::vector<float> conv_q, conv_k, conv_v;  // [P][K] taps, oldest → newest
  std::vector<float> a_log;                   // first num_heads entries of the padded tensor
  std::vector<float> dt_bias;                 // [P]
  std::vector<float> o_norm;                  // [head_dim], shared by all heads
  TrunkRef trunk;
};

struct MlaWeights {
  kern::DenseMat q_a, q_b, kv_a, kv_b, g, o;
  std::vector<float> q_a_norm, kv_a_norm;
  TrunkRef trunk;
};

struct MoeWeights {
  kern::DenseMat router;        // [E][H]
  std::vector<float> bias;      // e_score_correction_bias [E]
  kern::DenseMat down_lat;      // [L][H]
  kern::DenseMat up_lat;        // [H][L]
  std::vector<float> lat_norm;  // routed_expert_norm [L]
  FfnWeights shared;            // fused shared experts at full width
  TrunkRef trunk;
};

struct LayerWeights {
  int64_t layer = -1;
  MixerKind kind = MixerKind::KDA;
  bool dense = false;
  std::vector<float> in_norm, post_norm;
  std::vector<float> attn_res_fold, mlp_res_fold;  // w_norm ⊙ w_proj (AttnRes score vector)
  KdaWeights kda;
  MlaWeights mla;
  FfnWeights dense_ffn;
  MoeWeights moe;
};

struct GlobalWeights {
  kern::DenseMat embed, lm_head;
  std::vector<float> final_norm, out_res_fold;
};

struct ExpertWeights {
  kern::Mxfp4Mat w1, w2, w3;  // w1 gate, w3 up: [I][L]; w2 down: [L][I]
};

LayerWeights BindLayer(const ModelConfig& cfg, int64_t layer, const TensorResolver& find);
GlobalWeights BindGlobals(const ModelConfig& cfg, const TensorResolver& find);
ExpertWeights BindExpert(const ModelConfig& cfg, int64_t layer, int64_t expert,
                         const TensorResolver& find);

}  // namespace k3::compute
