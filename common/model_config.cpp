// config.json reader. Every field the engine uses is read explicitly; a missing required
// field is an error naming it, and a value the engine does not implement is refused rather
// than approximated (docs/model.md, "Configuration fields"). Documented optional defaults are listed in one place
// below (ParseModelConfig, "optional fields").
#include "common/model_config.h"

#include <cmath>
#include <fstream>
#include <set>
#include <sstream>

#include "common/error.h"
#include "common/user_file.h"
#include "common/json_strict.h"

namespace k3 {
namespace {

using nlohmann::json;

constexpr int64_t kMaxWidth = int64_t{1} << 20;   // hidden, intermediate, ranks, experts
constexpr int64_t kMaxCount = int64_t{1} << 12;   // layers, heads, per-head dims
constexpr int64_t kMaxVocab = int64_t{1} << 24;

// A JSON object plus the dotted path used to name its fields in errors.
struct Obj {
  const json& j;
  std::string prefix;  // e.g. "text_config." or "text_config.linear_attn_config."
  const std::string& file;

  std::string Name(const std::string& key) const { return prefix + key; }
  [[noreturn]] void Fail(const std::string& key, const std::string& why) const {
    throw BadModel(file + ": " + Name(key) + ": " + why);
  }
  // Present and not null.
  bool Has(const std::string& key) const { return j.contains(key) && !j[key].is_null(); }
  const json& Req(const std::string& key) const {
    if (!Has(key)) Fail(key, "required field is missing");
    return j[key];
  }
  int64_t Int(const std::string& key) const { return AsInt(key, Req(key)); }
  int64_t AsInt(const std::string& key, const json& v) const {
    if (v.is_number_unsigned()) {
      if (v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) Fail(key, "integer out of range");
      return static_cast<int64_t>(v.get<uint64_t>());
    }
    if (v.is_number_integer()) return v.get<int64_t>();
    Fail(key, "must be an integer, got " + Printable(v.dump()));
  }
  // Positive and at most `max`; the caps keep every derived byte count far from int64
  // overflow while leaving orders of magnitude of room above the release values.
  int64_t PosInt(const std::string& key, int64_t max = kMaxWidth) const {
    const int64_t v = Int(key);
    if (v <= 0) Fail(key, "must be positive, got " + std::to_string(v));
    if (v > max) Fail(key, "implausibly large (" + std::to_string(v) + " > " + std::to_string(max) + ")");
    return v;
  }
  double Num(const std::string& key) const {
    const json& v = Req(key);
    if (!v.is_number()) Fail(key, "must be a number, got " + Printable(v.dump()));
    const double d = v.get<double>();
    if (!std::isfinite(d)) Fail(key, "must be finite");
    return d;
  }
  bool Bool(const std::string& key) const {
    const json& v = Req(key);
    if (!v.is_boolean()) Fail(key, "must be true or false, got " + Printable(v.dump()));
    return v.get<bool>();
  }
  std::string Str(const std::string& key) const {
    const json& v = Req(key);
    if (!v.is_string()) Fail(key, "must be a string, got " + Printable(v.dump()));
    return v.get<std::string>();
  }
  Obj Sub(const std::string& key) const {
    const json& v = Req(key);
    if (!v.is_object()) Fail(key, "must be an object");
    return Obj{v, prefix + key + ".", file};
  }
};

// One-based layer lists -> 0-based kinds; both lists together must cover every layer once.
std::vector<MixerKind> LayerKinds(const Obj& lac, int64_t num_layers) {
  std::vector<int> seen(static_cast<size_t>(num_layers), 0);  // 0 none, 1 KDA, 2 MLA
  for (const char* key : {"kda_layers", "full_attn_layers"}) {
    const json& arr = lac.Req(key);
    if (!arr.is_array()) lac.Fail(key, "must be an array of one-based layer numbers");
    const int kind = std::string(key) == "kda_layers" ? 1 : 2;
    for (const json& v : arr) {
      const int64_t l = lac.AsInt(key, v);
      if (l < 1 || l > num_layers)
        lac.Fail(key, "layer " + std::to_string(l) + " outside 1.." + std::to_string(num_layers) +
                          " (lists are one-based)");
      int& s = seen[static_cast<size_t>(l - 1)];
      if (s == kind) lac.Fail(key, "layer " + std::to_string(l) + " listed twice");
      if (s != 0) lac.Fail(key, "layer " + std::to_string(l) + " is in both kda_layers and full_attn_layers");
      s = kind;
    }
  }
  std::vector<MixerKind> kinds;
  for (int64_t i = 0; i < num_layers; ++i) {
    const int s = seen[static_cast<size_t>(i)];
    if (s == 0)
      lac.Fail("kda_layers", "layer " + std::to_string(i + 1) +
                                 " is in neither kda_layers nor full_attn_layers");
    kinds.push_back(s == 1 ? MixerKind::KDA : MixerKind::MLA);
  }
  return kinds;
}

// Routed experts must be compressed-tensors MXFP4 (E2M1 + E8M0 per 32); the engine has no
// BF16 expert path, so a config without quantization_config is refused, not guessed.
int64_t ParseQuantization(const Obj& q) {
  if (q.Str("quant_method") != "compressed-tensors")
    q.Fail("quant_method", "only \"compressed-tensors\" is supported, got \"" + Printable(q.Str("quant_method")) + "\"");
  if (q.Str("format") != "mxfp4-pack-quantized")
    q.Fail("format", "only \"mxfp4-pack-quantized\" is supported, got \"" + Printable(q.Str("format")) + "\"");
  const Obj groups = q.Sub("config_groups");
  if (groups.j.size() != 1)
    q.Fail("config_groups", "exactly one quantization group is supported, got " + std::to_string(groups.j.size()));
  const std::string gname = groups.j.begin().key();
  const Obj g = groups.Sub(gname);
  if (g.Has("format") && g.Str("format") != "mxfp4-pack-quantized")
    g.Fail("format", "only \"mxfp4-pack-quantized\" is supported");
  if (g.Has("input_activations")) g.Fail("input_activations", "activation quantization is not supported");
  const Obj w = g.Sub("weights");
  if (w.Int("num_bits") != 4) w.Fail("num_bits", "must be 4 (MXFP4)");
  if (w.Str("type") != "float") w.Fail("type", "must be \"float\" (E2M1)");
  if (w.Str("strategy") != "group") w.Fail("strategy", "must be \"group\"");
  if (w.Int("group_size") != 32) w.Fail("group_size", "must be 32 (MXFP4 block)");
  if (!w.Bool("symmetric")) w.Fail("symmetric", "must be true");
  if (w.Has("dynamic") && w.Bool("dynamic")) w.Fail("dynamic", "must be false");
  return 32;
}

// Special ids: top level first, then text_config; absent or null -> -1.
int64_t SpecialId(const Obj& top, const Obj& tc, const std::string& key, int64_t vocab) {
  const Obj& o = top.Has(key) ? top : tc;
  if (!o.Has(key)) return -1;
  const int64_t id = o.Int(key);
  if (id < 0 || id >= vocab)
    o.Fail(key, "id " + std::to_string(id) + " outside the vocabulary 0.." + std::to_string(vocab - 1));
  return id;
}

// eos_token_id: one id or a list of ids (Hugging Face allows both); top level first, then
// text_config; absent or null -> none.
std::vector<int64_t> EosIds(const Obj& top, const Obj& tc, int64_t vocab) {
  const std::string key = "eos_token_id";
  const Obj& o = top.Has(key) ? top : tc;
  if (!o.Has(key)) return {};
  const json& v = o.j[key];
  std::vector<int64_t> ids;
  if (v.is_array()) {
    for (const json& e : v) ids.push_back(o.AsInt(key, e));
  } else {
    ids.push_back(o.Int(key));
  }
  for (int64_t id : ids)
    if (id < 0 || id >= vocab)
      o.Fail(key, "id " + std::to_string(id) + " outside the vocabulary 0.." + std::to_string(vocab - 1));
  return ids;
}

}  // namespace

ModelConfig ParseModelConfig(const std::string& json_text, const std::string& file) {
  const json root = ParseJsonStrict(json_text, file);
  if (!root.is_object()) throw BadModel(file + ": config is not a JSON object");
  const Obj top{root, "", file};
  const bool nested = root.contains("text_config");
  const Obj tc = nested ? top.Sub("text_config") : top;

  ModelConfig c;
  // ---- trunk ----
  c.hidden_size = tc.PosInt("hidden_size");
  c.num_layers = tc.PosInt("num_hidden_layers", kMaxCount);
  c.vocab_size = tc.PosInt("vocab_size", kMaxVocab);
  c.rms_norm_eps = tc.Num("rms_norm_eps");
  if (c.rms_norm_eps <= 0) tc.Fail("rms_norm_eps", "must be positive");
  if (tc.Str("hidden_act") != "situ")
    tc.Fail("hidden_act", "only \"situ\" is implemented, got \"" + Printable(tc.Str("hidden_act")) + "\"");
  c.first_k_dense_replace = tc.Int("first_k_dense_replace");
  if (c.first_k_dense_replace < 0 || c.first_k_dense_replace > c.num_layers)
    tc.Fail("first_k_dense_replace", "must be in 0..num_hidden_layers");
  if (c.first_k_dense_replace > 0) c.intermediate_size = tc.PosInt("intermediate_size");
  if (tc.Has("moe_layer_freq") && tc.Int("moe_layer_freq") != 1)
    tc.Fail("moe_layer_freq", "only 1 (every layer after the dense ones is MoE) is implemented");
  c.attn_res_block_size = tc.PosInt("attn_res_block_size");
  if (tc.Has("num_nextn_predict_layers") && tc.Int("num_nextn_predict_layers") != 0)
    tc.Fail("num_nextn_predict_layers", "multi-token-prediction layers are not supported (must be 0)");
  for (const Obj* o : {&top, &tc}) {
    if (o->Has("tie_word_embeddings") && o->Bool("tie_word_embeddings"))
      o->Fail("tie_word_embeddings", "tied embeddings are not implemented (K3 has a separate lm_head)");
  }

  // ---- optional fields with documented defaults (docs/model.md, "Configuration fields") ----
  c.situ_beta = tc.Has("activation_situ_beta") ? tc.Num("activation_situ_beta") : 1.0;
  if (c.situ_beta <= 0) tc.Fail("activation_situ_beta", "must be positive");
  c.situ_linear_capped = tc.Has("activation_situ_linear_beta");
  c.situ_linear_beta = c.situ_linear_capped ? tc.Num("activation_situ_linear_beta") : 0.0;
  if (c.situ_linear_capped && c.situ_linear_beta <= 0)
    tc.Fail("activation_situ_linear_beta", "must be positive (omit it for an uncapped up branch)");
  c.moe_renormalize = tc.Has("moe_renormalize") ? tc.Bool("moe_renormalize") : true;
  c.routed_scaling_factor = tc.Has("routed_scaling_factor") ? tc.Num("routed_scaling_factor") : 1.0;
  if (c.routed_scaling_factor <= 0) tc.Fail("routed_scaling_factor", "must be positive");
  c.max_position_embeddings = tc.Has("max_position_embeddings") ? tc.PosInt("max_position_embeddings", int64_t{1} << 40) : 0;

  // ---- Gated MLA (NoPE) ----
  c.mla_heads = tc.PosInt("num_attention_heads", kMaxCount);
  if (tc.Int("num_key_value_heads") != c.mla_heads)
    tc.Fail("num_key_value_heads", "must equal num_attention_heads (no GQA in MLA)");
  c.q_lora_rank = tc.PosInt("q_lora_rank");
  c.kv_lora_rank = tc.PosInt("kv_lora_rank");
  c.qk_nope_head_dim = tc.PosInt("qk_nope_head_dim", kMaxCount);
  c.qk_rope_head_dim = tc.PosInt("qk_rope_head_dim", kMaxCount);
  c.v_head_dim = tc.PosInt("v_head_dim", kMaxCount);
  if (!tc.Bool("mla_use_nope")) tc.Fail("mla_use_nope", "must be true (rotary embeddings are not implemented)");
  if (!tc.Bool("mla_use_output_gate")) tc.Fail("mla_use_output_gate", "must be true (ungated MLA is not implemented)");

  // ---- KDA ----
  const Obj lac = tc.Sub("linear_attn_config");
  c.kda_heads = lac.PosInt("num_heads", kMaxCount);
  c.kda_head_dim = lac.PosInt("head_dim", kMaxCount);
  c.conv_kernel = lac.Int("short_conv_kernel_size");
  if (c.conv_kernel < 1 || c.conv_kernel > 1024) lac.Fail("short_conv_kernel_size", "must be in 1..1024");
  c.gate_lower_bound = lac.Num("gate_lower_bound");
  if (c.gate_lower_bound >= 0) lac.Fail("gate_lower_bound", "must be negative (log-decay lower bound)");
  if (!lac.Bool("use_full_rank_gate"))
    lac.Fail("use_full_rank_gate", "must be true (low-rank output gate is not implemented)");
  c.layer_kind = LayerKinds(lac, c.num_layers);

  // ---- MoE ----
  c.num_experts = tc.PosInt("num_experts");
  c.top_k = tc.Int("num_experts_per_token");
  if (c.top_k < 1 || c.top_k > c.num_experts)
    tc.Fail("num_experts_per_token", "must be in 1..num_experts (" + std::to_string(c.num_experts) +
                                         "), got " + std::to_string(c.top_k));
  c.num_shared_experts = tc.Int("num_shared_experts");
  if (c.num_shared_experts < 0 || c.num_shared_experts > 1024) tc.Fail("num_shared_experts", "must be in 0..1024");
  c.moe_intermediate_size = tc.PosInt("moe_intermediate_size");
  c.latent_size = tc.PosInt("routed_expert_hidden_size");
  if (!tc.Bool("latent_moe_use_norm"))
    tc.Fail("latent_moe_use_norm", "must be true (LatentMoE without the aggregate norm is not implemented)");
  if (tc.Str("moe_router_activation_func") != "sigmoid")
    tc.Fail("moe_router_activation_func", "only \"sigmoid\" is implemented, got \"" +
                                              Printable(tc.Str("moe_router_activation_func")) + "\"");
  if (tc.Has("topk_method") && tc.Str("topk_method") != "noaux_tc")
    tc.Fail("topk_method", "only \"noaux_tc\" (bias-corrected selection) is implemented");
  if (tc.Has("use_grouped_topk") && tc.Bool("use_grouped_topk")) {
    if (tc.Int("num_expert_group") != 1)
      tc.Fail("num_expert_group", "group-limited routing is not implemented (must be 1)");
    if (tc.Int("topk_group") != 1)
      tc.Fail("topk_group", "group-limited routing is not implemented (must be 1)");
  }

  // ---- quantization (text_config first, the usual HF top level second) ----
  if (tc.Has("quantization_config")) {
    c.mxfp4_group = ParseQuantization(tc.Sub("quantization_config"));
  } else if (nested && top.Has("quantization_config")) {
    c.mxfp4_group = ParseQuantization(top.Sub("quantization_config"));
  } else {
    tc.Fail("quantization_config", "required field is missing (routed experts must be MXFP4; "
                                   "unquantized experts are not supported)");
  }
  // Expert input widths are the contraction dims of w1/w3 (latent) and w2 (intermediate).
  if (c.latent_size % c.mxfp4_group != 0)
    tc.Fail("routed_expert_hidden_size", "must be a multiple of the MXFP4 group " + std::to_string(c.mxfp4_group));
  if (c.moe_intermediate_size % c.mxfp4_group != 0)
    tc.Fail("moe_intermediate_size", "must be a multiple of the MXFP4 group " + std::to_string(c.mxfp4_group));

  c.bos_token_id = SpecialId(top, tc, "bos_token_id", c.vocab_size);
  c.eos_token_ids = EosIds(top, tc, c.vocab_size);
  c.eos_token_id = c.eos_token_ids.empty() ? -1 : c.eos_token_ids.front();
  c.pad_token_id = SpecialId(top, tc, "pad_token_id", c.vocab_size);
  return c;
}

ModelConfig LoadModelConfig(const std::string& path) {
  return ParseModelConfig(ReadUserFile(path, kMaxModelJsonBytes, "config", kExitBadModel), path);
}

int64_t ModelConfig::expert_bytes() const {
  // w1 and w3: [I, L]; w2: [L, I]. Each: I*L/2 packed nibbles + I*L/group E8M0 scales.
  const int64_t il = moe_intermediate_size * latent_size;
  return 3 * (il / 2 + il / mxfp4_group);
}

int64_t ModelConfig::num_kda_layers() const {
  int64_t n = 0;
  for (MixerKind k : layer_kind) n += k == MixerKind::KDA;
  return n;
}

int64_t ModelConfig::num_mla_layers() const {
  return static_cast<int64_t>(layer_kind.size()) - num_kda_layers();
}

}  // namespace k3
