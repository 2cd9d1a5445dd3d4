#include "saved_state.h"

#include <algorithm>

#include "common/error.h"

namespace k3::compute {

void SaveSequence(const std::string& path, const ModelConfig& cfg, const state::ModelIdentity& model,
                  const SequenceState& s, const std::vector<int32_t>& ids, const std::string& extra) {
  std::vector<std::span<const float>> body;
  for (int64_t l = 0; l < cfg.num_layers; ++l) {
    const size_t i = static_cast<size_t>(l);
    if (cfg.layer_kind[i] == MixerKind::KDA) {
      for (const std::vector<float>* v : {&s.kda[i].S, &s.kda[i].conv_q, &s.kda[i].conv_k, &s.kda[i].conv_v})
        body.emplace_back(v->data(), v->size());
    } else {
      const MlaCache& m = s.mla[i];
      if (m.len != s.position) throw RuntimeFailure("internal: MLA cache of layer " + std::to_string(l) + " out of step");
      body.emplace_back(m.c.data(), static_cast<size_t>(m.len * cfg.kv_lora_rank));
      body.emplace_back(m.kpe.data(), static_cast<size_t>(m.len * cfg.qk_rope_head_dim));
    }
  }
  state::StateInfo info;
  info.model = model;
  info.expert_inputs_bf16 = cfg.expert_inputs_bf16;
  info.position = s.position;
  info.ids = ids;
  info.extra = extra;
  state::WriteStateFile(path, cfg, info, body);
}

state::StateInfo LoadSequenceInto(const std::string& path, const ModelConfig& cfg, const state::ModelIdentity& model,
                                  int64_t context, SequenceState& into) {
  state::Expect want;
  want.cfg = &cfg;
  want.model = model;
  want.expert_inputs_bf16 = cfg.expert_inputs_bf16;
  want.context = context;
  into.Reset(cfg);
  auto sections = [&](int64_t position) {
    std::vector<std::span<float>> out;
    for (int64_t l = 0; l < cfg.num_layers; ++l) {
      const size_t i = static_cast<size_t>(l);
      if (cfg.layer_kind[i] == MixerKind::KDA) {
        KdaState& k = into.kda[i];
        for (std::vector<float>* v : {&k.S, &k.conv_q, &k.conv_k, &k.conv_v}) out.emplace_back(*v);
      } else {
        MlaCache& m = into.mla[i];
        m.c.resize(static_cast<size_t>(position * cfg.kv_lora_rank));
        m.kpe.resize(static_cast<size_t>(position * cfg.qk_rope_head_dim));
        m.len = position;
        out.emplace_back(m.c);
        out.emplace_back(m.kpe);
      }
    }
    return out;
  };
  state::StateInfo info = state::ReadStateFile(path, want, sections);
  into.position = info.position;
  return info;
}

SavedSequence LoadSequence(const std::string& path, const ModelConfig& cfg, const state::ModelIdentity& model,
                           int64_t context) {
  // Read straight into a new SequenceState (the live one stays as it is until this succeeds).
  SavedSequence r;
  state::StateInfo info = LoadSequenceInto(path, cfg, model, context, r.state);
  r.ids = std::move(info.ids);
  r.extra = std::move(info.extra);
  return r;
}

}  // namespace k3::compute
