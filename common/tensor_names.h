// The one place that spells checkpoint tensor names (docs/model.md, "Tensor names"), plus the
// per-layer tensor lists and byte ranges the trunk reader and expert fetcher plan reads with.
// Everyone resolves names through these functions; no other file formats a tensor name.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "common/model_config.h"
#include "common/safetensors.h"

namespace k3 {

// Per-layer tensors (prefix "language_model.model.layers.{L}.").
enum class TensorRole {
  // every layer
  kInputLayernorm,
  kPostAttentionLayernorm,
  kSelfAttentionResNorm,
  kSelfAttentionResProj,
  kMlpResNorm,
  kMlpResProj,
  // KDA (self_attn.)
  kKdaQProj,
  kKdaKProj,
  kKdaVProj,
  kKdaQConv1d,
  kKdaKConv1d,
  kKdaVConv1d,
  kKdaFAProj,
  kKdaFBProj,
  kKdaBProj,
  kKdaALog,
  kKdaDtBias,
  kKdaGProj,
  kKdaONorm,
  kKdaOProj,
  // Gated MLA (self_attn.)
  kMlaQAProj,
  kMlaQALayernorm,
  kMlaQBProj,
  kMlaKvAProjWithMqa,
  kMlaKvALayernorm,
  kMlaKvBProj,
  kMlaGProj,
  kMlaOProj,
  // dense FFN (mlp.), layers < first_k_dense_replace
  kDenseGateProj,
  kDenseUpProj,
  kDenseDownProj,
  // LatentMoE trunk (block_sparse_moe.)
  kMoeGate,
  kMoeGateBias,
  kMoeLatentDown,
  kMoeLatentNorm,
  kMoeLatentUp,
  kSharedGateProj,
  kSharedUpProj,
  kSharedDownProj,
};

// Model-level tensors.
enum class ModelRole { kEmbedTokens, kLmHead, kNorm, kOutputAttnResNorm, kOutputAttnResProj };
inline constexpr ModelRole kModelRoles[] = {ModelRole::kEmbedTokens, ModelRole::kLmHead, ModelRole::kNorm,
                                            ModelRole::kOutputAttnResNorm, ModelRole::kOutputAttnResProj};

// Routed expert projections: w1 = gate, w2 = down, w3 = up.
enum class ExpertProj { kW1, kW2, kW3 };

// Name suffix after the layer prefix, e.g. "self_attn.q_proj.weight".
const char* RoleSuffix(TensorRole role);
std::string LayerTensorName(int layer, TensorRole role);
// "...layers.{L}.block_sparse_moe.experts.{E}.w{1,2,3}.weight_{packed,scale}"
std::string ExpertTensorName(int layer, int expert, ExpertProj w, bool scale);
std::string ModelTensorName(ModelRole role);

// The trunk (non-expert) roles of one layer, by its mixer kind and dense/MoE kind.
std::vector<TensorRole> LayerTrunkRoles(const ModelConfig& cfg, int layer);
std::vector<std::string> LayerTrunkNames(const ModelConfig& cfg, int layer);
// All six tensor names of one expert, in w1,w2,w3 x packed,scale order.
std::vector<std::string> ExpertTensorNames(int layer, int expert);

// Dtype and shape as released (docs/model.md, "Tensor names", "Dtypes and bf16"). Loaders should compare shapes and
// may accept F32 where the release uses BF16 for small vectors ("Where sources disagree").
DType ReleaseDType(TensorRole role);
DType ReleaseDType(ModelRole role);
std::vector<int64_t> ExpectedShape(const ModelConfig& cfg, TensorRole role);
std::vector<int64_t> ExpectedShape(const ModelConfig& cfg, ModelRole role);
std::vector<int64_t> ExpectedExpertShape(const ModelConfig& cfg, ExpertProj w, bool scale);

// Bytes of a layer's trunk tensors computed from the config and the release dtypes
// (for planning without shard headers, e.g. --dry-run on the real release).
int64_t LayerTrunkBytes(const ModelConfig& cfg, int layer);

// A byte run inside one shard. tensor_bytes is the sum of the member tensors; when it
// equals end - begin the run holds nothing else (contiguous).
struct ByteRange {
  int shard = 0;
  int64_t begin = 0;
  int64_t end = 0;
  int64_t tensor_bytes = 0;
  bool contiguous() const { return tensor_bytes == end - begin; }
};

// [min offset, max end) over the layer's actual trunk tensors. Throws BadModel if a tensor
// is missing or the trunk is split across shards.
ByteRange LayerTrunkRange(const Checkpoint& ck, const ModelConfig& cfg, int layer);
// One expert's six tensors; throws BadModel if missing, split across shards, or not contiguous
// (the fetcher reads an expert with one request).
ByteRange ExpertRange(const Checkpoint& ck, int layer, int expert);

// Which model-level tensors the globals run holds: the embedding and lm_head leave it when
// they are streamed (docs/pipeline.md "Streamed embedding and lm_head"); norm and
// output_attn_res_* are always in it.
struct GlobalsSet {
  bool embed = true;
  bool lm_head = true;
  bool holds(ModelRole role) const {
    return (role != ModelRole::kEmbedTokens || embed) && (role != ModelRole::kLmHead || lm_head);
  }
};

// The globals run, the pseudo-layer num_layers of the trunk: [min offset, max end) of the
// model-level tensors in `set`, read and pinned as one run. Throws BadModel if a model-level
// tensor is missing or they are not all in one shard (streamed ones included: the whole
// model level of a checkpoint sits in one shard).
ByteRange GlobalsRange(const Checkpoint& ck, GlobalsSet set = {});

// Checks that every tensor the config implies (trunk of every layer, every expert, the model
// level) is present with the expected shape and a usable dtype: F32 or BF16 for trunk and
// model tensors (the release mixes both, docs/model.md "Dtypes and bf16"), U8 for expert tensors. A_log may be [heads]
// or padded to [head_dim]. Throws BadModel naming the first offending tensor.
void ValidateCheckpoint(const Checkpoint& ck, const ModelConfig& cfg);

}  // namespace k3
