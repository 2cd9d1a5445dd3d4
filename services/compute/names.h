// Checkpoint tensor names (K3-MODEL.md §2.2-2.3), in one place until common/tensor_names.h
// lands. Every name is the released one: "language_model.model.…" plus the separate head.
#pragma once
#include <cstdint>
#include <string>

namespace k3::compute::names {

inline const std::string kModel = "language_model.model.";
inline std::string Embed() { return kModel + "embed_tokens.weight"; }
inline std::string LmHead() { return "language_model.lm_head.weight"; }
inline std::string FinalNorm() { return kModel + "norm.weight"; }
inline std::string OutResNorm() { return kModel + "output_attn_res_norm.weight"; }
inline std::string OutResProj() { return kModel + "output_attn_res_proj.weight"; }

inline std::string Layer(int64_t l) { return kModel + "layers." + std::to_string(l) + "."; }
// `leaf` is relative to the layer, e.g. "input_layernorm.weight", "self_attn.q_proj.weight".
inline std::string LayerTensor(int64_t l, const std::string& leaf) { return Layer(l) + leaf; }
// Routed expert tensor: which = "w1"/"w2"/"w3", part = "weight_packed"/"weight_scale".
inline std::string Expert(int64_t l, int64_t e, const std::string& which, const std::string& part) {
  return Layer(l) + "block_sparse_moe.experts." + std::to_string(e) + "." + which + "." + part;
}

}  // namespace k3::compute::names
