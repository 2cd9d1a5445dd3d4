#include "weights.h"

#include <algorithm>
#include <cstring>
#include <sstream>

#include "common/error.h"
#include "common/tensor_names.h"

namespace k3::compute {

namespace {

std::string ShapeStr(const std::vector<int64_t>& s) {
  std::ostringstream o;
  o << "[";
  for (size_t i = 0; i < s.size(); ++i) o << (i ? "," : "") << s[i];
  o << "]";
  return o.str();
}

[[noreturn]] void Fail(const std::string& name, const std::string& what) {
  throw BadModel("tensor " + name + ": " + what);
}

void CheckShape(const std::string& name, const TensorInfo& info,
                const std::vector<std::vector<int64_t>>& accepted) {
  for (const auto& s : accepted)
    if (info.shape == s) return;
  Fail(name, "shape " + ShapeStr(info.shape) + ", expected " + ShapeStr(accepted.front()));
}

RawTensor FindFloat(const TensorResolver& find, const std::string& name) {
  RawTensor r = find(name);
  if (!r.info || !r.data) Fail(name, "not found");
  if (r.info->dtype != DType::F32 && r.info->dtype != DType::BF16)
    Fail(name, std::string("dtype ") + DTypeName(r.info->dtype) + ", expected F32 or BF16");
  return r;
}

// A [rows, cols] matrix kept as a view into the mapped bytes.
kern::DenseMat Mat(const TensorResolver& find, const std::string& name, int64_t rows,
                   int64_t cols) {
  RawTensor r = FindFloat(find, name);
  CheckShape(name, *r.info, {{rows, cols}});
  kern::DenseMat m;
  m.data = r.data;
  m.format = r.info->dtype == DType::F32 ? kern::WFormat::F32 : kern::WFormat::BF16;
  m.rows = rows;
  m.cols = cols;
  return m;
}

// A small tensor widened to float; `accepted` lists the shapes allowed, `take` how many
// leading values are kept (0 = all).
std::vector<float> Vec(const TensorResolver& find, const std::string& name,
                       const std::vector<std::vector<int64_t>>& accepted, int64_t take = 0) {
  RawTensor r = FindFloat(find, name);
  CheckShape(name, *r.info, accepted);
  const int64_t n = r.info->numel();
  const int64_t keep = take > 0 ? take : n;
  std::vector<float> out(static_cast<size_t>(keep));
  if (r.info->dtype == DType::F32) {
    std::memcpy(out.data(), r.data, static_cast<size_t>(keep) * 4);
  } else {
    const auto* p = static_cast<const uint8_t*>(r.data);
    for (int64_t i = 0; i < keep; ++i) {
      uint16_t b;
      std::memcpy(&b, p + 2 * i, 2);
      out[static_cast<size_t>(i)] = kern::Bf16ToF32(b);
    }
  }
  return out;
}

std::vector<float> Fold(const std::vector<float>& a, const std::vector<float>& b) {
  std::vector<float> r(a.size());
  for (size_t i = 0; i < a.size(); ++i) r[i] = a[i] * b[i];
  return r;
}

kern::Mxfp4Mat Mx(const ModelConfig& cfg, const TensorResolver& find, const std::string& packed,
                  const std::string& scales, int64_t rows, int64_t cols) {
  const int64_t g = cfg.mxfp4_group;
  RawTensor p = find(packed), s = find(scales);
  if (!p.info || !p.data) Fail(packed, "not found");
  if (!s.info || !s.data) Fail(scales, "not found");
  if (p.info->dtype != DType::U8) Fail(packed, std::string("dtype ") + DTypeName(p.info->dtype) + ", expected U8");
  if (s.info->dtype != DType::U8) Fail(scales, std::string("dtype ") + DTypeName(s.info->dtype) + ", expected U8");
  CheckShape(packed, *p.info, {{rows, cols / 2}});
  CheckShape(scales, *s.info, {{rows, cols / g}});
  kern::Mxfp4Mat m;
  m.packed = static_cast<const uint8_t*>(p.data);
  m.scales = static_cast<const uint8_t*>(s.data);
  m.rows = rows;
  m.cols = cols;
  m.group = g;
  return m;
}

FfnWeights Ffn(const TensorResolver& find, const std::string& gate, const std::string& up,
               const std::string& down, int64_t H, int64_t I) {
  FfnWeights f;
  f.gate = Mat(find, gate, I, H);
  f.up = Mat(find, up, I, H);
  f.down = Mat(find, down, H, I);
  return f;
}

}  // namespace

LayerWeights BindLayer(const ModelConfig& cfg, int64_t l, const TensorResolver& find) {
  const int64_t H = cfg.hidden_size;
  auto N = [&](TensorRole role) { return LayerTensorName(static_cast<int>(l), role); };
  LayerWeights w;
  w.layer = l;
  w.kind = cfg.layer_kind.at(static_cast<size_t>(l));
  w.dense = cfg.is_dense(l);
  const std::vector<std::vector<int64_t>> vecH = {{H}};
  const std::vector<std::vector<int64_t>> projH = {{1, H}, {H}};
  w.in_norm = Vec(find, N(TensorRole::kInputLayernorm), vecH);
  w.post_norm = Vec(find, N(TensorRole::kPostAttentionLayernorm), vecH);
  w.attn_res_fold = Fold(Vec(find, N(TensorRole::kSelfAttentionResNorm), vecH),
                         Vec(find, N(TensorRole::kSelfAttentionResProj), projH));
  w.mlp_res_fold = Fold(Vec(find, N(TensorRole::kMlpResNorm), vecH),
                        Vec(find, N(TensorRole::kMlpResProj), projH));

  if (w.kind == MixerKind::KDA) {
    const int64_t P = cfg.kda_proj(), D = cfg.kda_head_dim, K = cfg.conv_kernel;
    KdaWeights& k = w.kda;
    k.q = Mat(find, N(TensorRole::kKdaQProj), P, H);
    k.k = Mat(find, N(TensorRole::kKdaKProj), P, H);
    k.v = Mat(find, N(TensorRole::kKdaVProj), P, H);
    k.f_a = Mat(find, N(TensorRole::kKdaFAProj), D, H);
    k.f_b = Mat(find, N(TensorRole::kKdaFBProj), P, D);
    k.b = Mat(find, N(TensorRole::kKdaBProj), cfg.kda_heads, H);
    k.g = Mat(find, N(TensorRole::kKdaGProj), P, H);
    k.o = Mat(find, N(TensorRole::kKdaOProj), H, P);
    const std::vector<std::vector<int64_t>> conv = {{P, 1, K}, {P, K}};
    k.conv_q = Vec(find, N(TensorRole::kKdaQConv1d), conv);
    k.conv_k = Vec(find, N(TensorRole::kKdaKConv1d), conv);
    k.conv_v = Vec(find, N(TensorRole::kKdaVConv1d), conv);
    // A_log ships zero-padded to head_dim entries; only the first num_heads are per-head
    // decay scales (docs/model.md, "Where sources disagree"). Accept the padded and the exact length.
    std::vector<std::vector<int64_t>> alog = {{std::max(D, cfg.kda_heads)}, {cfg.kda_heads},
                                              {cfg.kda_heads, 1}, {1, 1, cfg.kda_heads, 1}};
    k.a_log = Vec(find, N(TensorRole::kKdaALog), alog, cfg.kda_heads);
    k.dt_bias = Vec(find, N(TensorRole::kKdaDtBias), {{P}});
    k.o_norm = Vec(find, N(TensorRole::kKdaONorm), {{D}});
  } else {
    const int64_t nh = cfg.mla_heads, ql = cfg.q_lora_rank, kl = cfg.kv_lora_rank;
    const int64_t qh = cfg.mla_q_head(), rope = cfg.qk_rope_head_dim;
    const int64_t kvh = cfg.qk_nope_head_dim + cfg.v_head_dim;
    MlaWeights& m = w.mla;
    m.q_a = Mat(find, N(TensorRole::kMlaQAProj), ql, H);
    m.q_a_norm = Vec(find, N(TensorRole::kMlaQALayernorm), {{ql}});
    m.q_b = Mat(find, N(TensorRole::kMlaQBProj), nh * qh, ql);
    m.kv_a = Mat(find, N(TensorRole::kMlaKvAProjWithMqa), kl + rope, H);
    m.kv_a_norm = Vec(find, N(TensorRole::kMlaKvALayernorm), {{kl}});
    m.kv_b = Mat(find, N(TensorRole::kMlaKvBProj), nh * kvh, kl);
    m.g = Mat(find, N(TensorRole::kMlaGProj), nh * cfg.v_head_dim, H);
    m.o = Mat(find, N(TensorRole::kMlaOProj), H, nh * cfg.v_head_dim);
  }

  if (w.dense) {
    w.dense_ffn = Ffn(find, N(TensorRole::kDenseGateProj), N(TensorRole::kDenseUpProj),
                      N(TensorRole::kDenseDownProj), H, cfg.intermediate_size);
  } else {
    const int64_t E = cfg.num_experts, L = cfg.latent_size;
    MoeWeights& m = w.moe;
    m.router = Mat(find, N(TensorRole::kMoeGate), E, H);
    m.bias = Vec(find, N(TensorRole::kMoeGateBias), {{E}});
    m.down_lat = Mat(find, N(TensorRole::kMoeLatentDown), L, H);
    m.up_lat = Mat(find, N(TensorRole::kMoeLatentUp), H, L);
    m.lat_norm = Vec(find, N(TensorRole::kMoeLatentNorm), {{L}});
    m.shared = Ffn(find, N(TensorRole::kSharedGateProj), N(TensorRole::kSharedUpProj),
                   N(TensorRole::kSharedDownProj), H, cfg.shared_width());
    m.shared.gate_role = TensorRole::kSharedGateProj;
    m.shared.up_role = TensorRole::kSharedUpProj;
    m.shared.down_role = TensorRole::kSharedDownProj;
  }
  return w;
}

GlobalWeights BindGlobals(const ModelConfig& cfg, const TensorResolver& find) {
  const int64_t H = cfg.hidden_size, V = cfg.vocab_size;
  GlobalWeights g;
  g.embed = Mat(find, ModelTensorName(ModelRole::kEmbedTokens), V, H);
  g.lm_head = Mat(find, ModelTensorName(ModelRole::kLmHead), V, H);
  g.final_norm = Vec(find, ModelTensorName(ModelRole::kNorm), {{H}});
  g.out_res_fold = Fold(Vec(find, ModelTensorName(ModelRole::kOutputAttnResNorm), {{H}}),
                        Vec(find, ModelTensorName(ModelRole::kOutputAttnResProj), {{1, H}, {H}}));
  return g;
}

ExpertWeights BindExpert(const ModelConfig& cfg, int64_t l, int64_t e, const TensorResolver& find) {
  const int64_t I = cfg.moe_intermediate_size, L = cfg.latent_size;
  auto n = [&](ExpertProj w, bool scale) {
    return ExpertTensorName(static_cast<int>(l), static_cast<int>(e), w, scale);
  };
  ExpertWeights w;
  w.w1 = Mx(cfg, find, n(ExpertProj::kW1, false), n(ExpertProj::kW1, true), I, L);
  w.w3 = Mx(cfg, find, n(ExpertProj::kW3, false), n(ExpertProj::kW3, true), I, L);
  w.w2 = Mx(cfg, find, n(ExpertProj::kW2, false), n(ExpertProj::kW2, true), L, I);
  return w;
}

}  // namespace k3::compute
