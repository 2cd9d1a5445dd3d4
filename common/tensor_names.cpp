#include "common/tensor_names.h"

#include <algorithm>

#include "common/error.h"

namespace k3 {
namespace {

constexpr const char* kLayerPrefix = "language_model.model.layers.";

struct RoleInfo {
  TensorRole role;
  const char* suffix;
  DType dtype;  // as released (docs/model.md, "Dtypes and bf16")
};

// F32 only for the KDA conv taps, A_log, dt_bias, o_norm and the router bias.
constexpr RoleInfo kRoles[] = {
    {TensorRole::kInputLayernorm, "input_layernorm.weight", DType::BF16},
    {TensorRole::kPostAttentionLayernorm, "post_attention_layernorm.weight", DType::BF16},
    {TensorRole::kSelfAttentionResNorm, "self_attention_res_norm.weight", DType::BF16},
    {TensorRole::kSelfAttentionResProj, "self_attention_res_proj.weight", DType::BF16},
    {TensorRole::kMlpResNorm, "mlp_res_norm.weight", DType::BF16},
    {TensorRole::kMlpResProj, "mlp_res_proj.weight", DType::BF16},
    {TensorRole::kKdaQProj, "self_attn.q_proj.weight", DType::BF16},
    {TensorRole::kKdaKProj, "self_attn.k_proj.weight", DType::BF16},
    {TensorRole::kKdaVProj, "self_attn.v_proj.weight", DType::BF16},
    {TensorRole::kKdaQConv1d, "self_attn.q_conv1d.weight", DType::F32},
    {TensorRole::kKdaKConv1d, "self_attn.k_conv1d.weight", DType::F32},
    {TensorRole::kKdaVConv1d, "self_attn.v_conv1d.weight", DType::F32},
    {TensorRole::kKdaFAProj, "self_attn.f_a_proj.weight", DType::BF16},
    {TensorRole::kKdaFBProj, "self_attn.f_b_proj.weight", DType::BF16},
    {TensorRole::kKdaBProj, "self_attn.b_proj.weight", DType::BF16},
    {TensorRole::kKdaALog, "self_attn.A_log", DType::F32},
    {TensorRole::kKdaDtBias, "self_attn.dt_bias", DType::F32},
    {TensorRole::kKdaGProj, "self_attn.g_proj.weight", DType::BF16},
    {TensorRole::kKdaONorm, "self_attn.o_norm.weight", DType::F32},
    {TensorRole::kKdaOProj, "self_attn.o_proj.weight", DType::BF16},
    {TensorRole::kMlaQAProj, "self_attn.q_a_proj.weight", DType::BF16},
    {TensorRole::kMlaQALayernorm, "self_attn.q_a_layernorm.weight", DType::BF16},
    {TensorRole::kMlaQBProj, "self_attn.q_b_proj.weight", DType::BF16},
    {TensorRole::kMlaKvAProjWithMqa, "self_attn.kv_a_proj_with_mqa.weight", DType::BF16},
    {TensorRole::kMlaKvALayernorm, "self_attn.kv_a_layernorm.weight", DType::BF16},
    {TensorRole::kMlaKvBProj, "self_attn.kv_b_proj.weight", DType::BF16},
    {TensorRole::kMlaGProj, "self_attn.g_proj.weight", DType::BF16},
    {TensorRole::kMlaOProj, "self_attn.o_proj.weight", DType::BF16},
    {TensorRole::kDenseGateProj, "mlp.gate_proj.weight", DType::BF16},
    {TensorRole::kDenseUpProj, "mlp.up_proj.weight", DType::BF16},
    {TensorRole::kDenseDownProj, "mlp.down_proj.weight", DType::BF16},
    {TensorRole::kMoeGate, "block_sparse_moe.gate.weight", DType::BF16},
    {TensorRole::kMoeGateBias, "block_sparse_moe.gate.e_score_correction_bias", DType::F32},
    {TensorRole::kMoeLatentDown, "block_sparse_moe.routed_expert_down_proj.weight", DType::BF16},
    {TensorRole::kMoeLatentNorm, "block_sparse_moe.routed_expert_norm.weight", DType::BF16},
    {TensorRole::kMoeLatentUp, "block_sparse_moe.routed_expert_up_proj.weight", DType::BF16},
    {TensorRole::kSharedGateProj, "block_sparse_moe.shared_experts.gate_proj.weight", DType::BF16},
    {TensorRole::kSharedUpProj, "block_sparse_moe.shared_experts.up_proj.weight", DType::BF16},
    {TensorRole::kSharedDownProj, "block_sparse_moe.shared_experts.down_proj.weight", DType::BF16},
};

const RoleInfo& Info(TensorRole r) {
  for (const RoleInfo& i : kRoles)
    if (i.role == r) return i;
  throw RuntimeFailure("tensor_names: unknown tensor role " + std::to_string(static_cast<int>(r)));
}

int64_t Numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string ExpertPrefix(int layer, int expert) {
  return kLayerPrefix + std::to_string(layer) + ".block_sparse_moe.experts." + std::to_string(expert) + ".";
}

// Min/max over the given tensors, which must all live in one shard.
ByteRange RangeOf(const Checkpoint& ck, const std::vector<std::string>& names, const std::string& what) {
  ByteRange r;
  bool first = true;
  for (const std::string& n : names) {
    const TensorInfo& t = ck.at(n);
    if (first) {
      r.shard = t.shard;
      r.begin = t.file_offset;
      r.end = t.file_offset + t.nbytes;
      first = false;
    } else {
      if (t.shard != r.shard)
        throw BadModel(ck.dir() + ": " + what + " is split across shards (" + n + " is in " +
                       ck.shard_paths()[static_cast<size_t>(t.shard)] + ")");
      r.begin = std::min(r.begin, t.file_offset);
      r.end = std::max(r.end, t.file_offset + t.nbytes);
    }
    r.tensor_bytes += t.nbytes;
  }
  return r;
}

}  // namespace

const char* RoleSuffix(TensorRole role) { return Info(role).suffix; }

std::string LayerTensorName(int layer, TensorRole role) {
  return kLayerPrefix + std::to_string(layer) + "." + RoleSuffix(role);
}

std::string ExpertTensorName(int layer, int expert, ExpertProj w, bool scale) {
  const char* proj = w == ExpertProj::kW1 ? "w1" : w == ExpertProj::kW2 ? "w2" : "w3";
  return ExpertPrefix(layer, expert) + proj + (scale ? ".weight_scale" : ".weight_packed");
}

std::string ModelTensorName(ModelRole role) {
  switch (role) {
    case ModelRole::kEmbedTokens: return "language_model.model.embed_tokens.weight";
    case ModelRole::kLmHead: return "language_model.lm_head.weight";
    case ModelRole::kNorm: return "language_model.model.norm.weight";
    case ModelRole::kOutputAttnResNorm: return "language_model.model.output_attn_res_norm.weight";
    case ModelRole::kOutputAttnResProj: return "language_model.model.output_attn_res_proj.weight";
  }
  throw RuntimeFailure("tensor_names: unknown model role");
}

std::vector<TensorRole> LayerTrunkRoles(const ModelConfig& cfg, int layer) {
  if (layer < 0 || layer >= cfg.num_layers || static_cast<size_t>(layer) >= cfg.layer_kind.size())
    throw RuntimeFailure("tensor_names: layer " + std::to_string(layer) + " out of range");
  using R = TensorRole;
  std::vector<R> roles = {R::kInputLayernorm, R::kPostAttentionLayernorm, R::kSelfAttentionResNorm,
                          R::kSelfAttentionResProj, R::kMlpResNorm, R::kMlpResProj};
  if (cfg.layer_kind[static_cast<size_t>(layer)] == MixerKind::KDA) {
    roles.insert(roles.end(), {R::kKdaQProj, R::kKdaKProj, R::kKdaVProj, R::kKdaQConv1d, R::kKdaKConv1d,
                               R::kKdaVConv1d, R::kKdaFAProj, R::kKdaFBProj, R::kKdaBProj, R::kKdaALog,
                               R::kKdaDtBias, R::kKdaGProj, R::kKdaONorm, R::kKdaOProj});
  } else {
    roles.insert(roles.end(), {R::kMlaQAProj, R::kMlaQALayernorm, R::kMlaQBProj, R::kMlaKvAProjWithMqa,
                               R::kMlaKvALayernorm, R::kMlaKvBProj, R::kMlaGProj, R::kMlaOProj});
  }
  if (cfg.is_dense(layer)) {
    roles.insert(roles.end(), {R::kDenseGateProj, R::kDenseUpProj, R::kDenseDownProj});
  } else {
    roles.insert(roles.end(), {R::kMoeGate, R::kMoeGateBias, R::kMoeLatentDown, R::kMoeLatentNorm, R::kMoeLatentUp});
    if (cfg.num_shared_experts > 0)
      roles.insert(roles.end(), {R::kSharedGateProj, R::kSharedUpProj, R::kSharedDownProj});
  }
  return roles;
}

std::vector<std::string> LayerTrunkNames(const ModelConfig& cfg, int layer) {
  std::vector<std::string> names;
  for (TensorRole r : LayerTrunkRoles(cfg, layer)) names.push_back(LayerTensorName(layer, r));
  return names;
}

std::vector<std::string> ExpertTensorNames(int layer, int expert) {
  std::vector<std::string> names;
  for (ExpertProj w : {ExpertProj::kW1, ExpertProj::kW2, ExpertProj::kW3})
    for (bool scale : {false, true}) names.push_back(ExpertTensorName(layer, expert, w, scale));
  return names;
}

DType ReleaseDType(TensorRole role) { return Info(role).dtype; }
DType ReleaseDType(ModelRole) { return DType::BF16; }

std::vector<int64_t> ExpectedShape(const ModelConfig& c, TensorRole role) {
  const int64_t H = c.hidden_size;
  const int64_t P = c.kda_proj();
  using R = TensorRole;
  switch (role) {
    case R::kInputLayernorm:
    case R::kPostAttentionLayernorm:
    case R::kSelfAttentionResNorm:
    case R::kMlpResNorm: return {H};
    case R::kSelfAttentionResProj:
    case R::kMlpResProj: return {1, H};
    case R::kKdaQProj:
    case R::kKdaKProj:
    case R::kKdaVProj:
    case R::kKdaGProj: return {P, H};
    case R::kKdaQConv1d:
    case R::kKdaKConv1d:
    case R::kKdaVConv1d: return {P, 1, c.conv_kernel};
    case R::kKdaFAProj: return {c.kda_head_dim, H};
    case R::kKdaFBProj: return {P, c.kda_head_dim};
    case R::kKdaBProj: return {c.kda_heads, H};
    // Released zero-padded from num_heads to head_dim (docs/model.md, "Where sources disagree").
    case R::kKdaALog: return {std::max(c.kda_heads, c.kda_head_dim)};
    case R::kKdaDtBias: return {P};
    case R::kKdaONorm: return {c.kda_head_dim};
    case R::kKdaOProj: return {H, P};
    case R::kMlaQAProj: return {c.q_lora_rank, H};
    case R::kMlaQALayernorm: return {c.q_lora_rank};
    case R::kMlaQBProj: return {c.mla_heads * c.mla_q_head(), c.q_lora_rank};
    case R::kMlaKvAProjWithMqa: return {c.kv_lora_rank + c.qk_rope_head_dim, H};
    case R::kMlaKvALayernorm: return {c.kv_lora_rank};
    case R::kMlaKvBProj: return {c.mla_heads * (c.qk_nope_head_dim + c.v_head_dim), c.kv_lora_rank};
    case R::kMlaGProj: return {c.mla_heads * c.v_head_dim, H};
    case R::kMlaOProj: return {H, c.mla_heads * c.v_head_dim};
    case R::kDenseGateProj:
    case R::kDenseUpProj: return {c.intermediate_size, H};
    case R::kDenseDownProj: return {H, c.intermediate_size};
    case R::kMoeGate: return {c.num_experts, H};
    case R::kMoeGateBias: return {c.num_experts};
    case R::kMoeLatentDown: return {c.latent_size, H};
    case R::kMoeLatentNorm: return {c.latent_size};
    case R::kMoeLatentUp: return {H, c.latent_size};
    case R::kSharedGateProj:
    case R::kSharedUpProj: return {c.shared_width(), H};
    case R::kSharedDownProj: return {H, c.shared_width()};
  }
  throw RuntimeFailure("tensor_names: unknown tensor role");
}

std::vector<int64_t> ExpectedShape(const ModelConfig& c, ModelRole role) {
  switch (role) {
    case ModelRole::kEmbedTokens:
    case ModelRole::kLmHead: return {c.vocab_size, c.hidden_size};
    case ModelRole::kNorm:
    case ModelRole::kOutputAttnResNorm: return {c.hidden_size};
    case ModelRole::kOutputAttnResProj: return {1, c.hidden_size};
  }
  throw RuntimeFailure("tensor_names: unknown model role");
}

std::vector<int64_t> ExpectedExpertShape(const ModelConfig& c, ExpertProj w, bool scale) {
  // w1/w3 map latent -> intermediate ([I, L]); w2 maps intermediate -> latent ([L, I]).
  const int64_t rows = w == ExpertProj::kW2 ? c.latent_size : c.moe_intermediate_size;
  const int64_t cols = w == ExpertProj::kW2 ? c.moe_intermediate_size : c.latent_size;
  return {rows, scale ? cols / c.mxfp4_group : cols / 2};
}

int64_t LayerTrunkBytes(const ModelConfig& cfg, int layer) {
  int64_t total = 0;
  for (TensorRole r : LayerTrunkRoles(cfg, layer))
    total += Numel(ExpectedShape(cfg, r)) * DTypeSize(ReleaseDType(r));
  return total;
}

ByteRange LayerTrunkRange(const Checkpoint& ck, const ModelConfig& cfg, int layer) {
  return RangeOf(ck, LayerTrunkNames(cfg, layer), "layer " + std::to_string(layer) + " trunk");
}

ByteRange GlobalsRange(const Checkpoint& ck, GlobalsSet set) {
  std::vector<std::string> all, kept;
  for (ModelRole role : kModelRoles) {
    all.push_back(ModelTensorName(role));
    if (set.holds(role)) kept.push_back(all.back());
  }
  RangeOf(ck, all, "the model-level tensors (the globals run)");
  return RangeOf(ck, kept, "the globals run");
}

ByteRange ExpertRange(const Checkpoint& ck, int layer, int expert) {
  const std::string what = "layer " + std::to_string(layer) + " expert " + std::to_string(expert);
  const ByteRange r = RangeOf(ck, ExpertTensorNames(layer, expert), what);
  if (!r.contiguous())
    throw BadModel(ck.dir() + ": " + what + " tensors are not contiguous (span " +
                   std::to_string(r.end - r.begin) + " bytes, tensors " + std::to_string(r.tensor_bytes) + ")");
  return r;
}

namespace {

std::string ShapeStr(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) {
    if (i) out += ',';
    out += std::to_string(s[i]);
  }
  return out + "]";
}

void CheckTensor(const Checkpoint& ck, const std::string& name, const std::vector<int64_t>& shape,
                 const std::vector<int64_t>& alt_shape, bool expert) {
  if (!ck.has(name)) throw BadModel(ck.dir() + ": tensor " + name + " is missing");
  const TensorInfo& t = ck.at(name);
  if (t.shape != shape && t.shape != alt_shape)
    throw BadModel(ck.dir() + ": tensor " + name + " has shape " + ShapeStr(t.shape) + ", expected " + ShapeStr(shape));
  const bool ok = expert ? t.dtype == DType::U8 : (t.dtype == DType::F32 || t.dtype == DType::BF16);
  if (!ok)
    throw BadModel(ck.dir() + ": tensor " + name + " has dtype " + DTypeName(t.dtype) + ", expected " +
                   (expert ? "U8" : "F32 or BF16"));
}

}  // namespace

void ValidateCheckpoint(const Checkpoint& ck, const ModelConfig& cfg) {
  for (int l = 0; l < cfg.num_layers; ++l) {
    for (TensorRole r : LayerTrunkRoles(cfg, l)) {
      const std::vector<int64_t> shape = ExpectedShape(cfg, r);
      const std::vector<int64_t> alt = r == TensorRole::kKdaALog ? std::vector<int64_t>{cfg.kda_heads} : shape;
      CheckTensor(ck, LayerTensorName(l, r), shape, alt, false);
    }
    if (cfg.is_dense(l)) continue;
    for (int e = 0; e < cfg.num_experts; ++e)
      for (ExpertProj w : {ExpertProj::kW1, ExpertProj::kW2, ExpertProj::kW3})
        for (bool s : {false, true}) {
          const std::vector<int64_t> shape = ExpectedExpertShape(cfg, w, s);
          CheckTensor(ck, ExpertTensorName(l, e, w, s), shape, shape, true);
        }
  }
  for (ModelRole r : {ModelRole::kEmbedTokens, ModelRole::kLmHead, ModelRole::kNorm, ModelRole::kOutputAttnResNorm,
                      ModelRole::kOutputAttnResProj}) {
    const std::vector<int64_t> shape = ExpectedShape(cfg, r);
    CheckTensor(ck, ModelTensorName(r), shape, shape, false);
  }
}

}  // namespace k3
