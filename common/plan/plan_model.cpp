#include "common/plan/plan_model.h"

#include <algorithm>

#include "common/plan/trunk_pieces.h"
#include "common/read_window.h"
#include "common/tensor_names.h"

namespace k3::plan {

int64_t LayerMinPieceSlot(const PlanModel& m, int layer) {
  const auto l = static_cast<size_t>(layer);
  const int64_t whole = WidenedBytes(m.trunk_bytes.at(l));
  if (m.min_piece_slot.size() == m.trunk_bytes.size()) return std::min(m.min_piece_slot[l], whole);
  return std::min(MinPieceSlot(ReleasePieceTensors(m.cfg, layer)), whole);
}

PlanModel PlanModelFromConfig(const ModelConfig& cfg) {
  PlanModel m;
  m.cfg = cfg;
  for (int l = 0; l < cfg.num_layers; ++l) m.trunk_bytes.push_back(LayerTrunkBytes(cfg, l));
  m.expert_bytes = cfg.expert_bytes();
  auto bytes_of = [&](ModelRole r) {
    int64_t n = DTypeSize(ReleaseDType(r));
    for (int64_t d : ExpectedShape(cfg, r)) n *= d;
    return n;
  };
  m.embed_bytes = bytes_of(ModelRole::kEmbedTokens);
  m.small_globals_bytes = bytes_of(ModelRole::kNorm) + bytes_of(ModelRole::kOutputAttnResNorm) +
                          bytes_of(ModelRole::kOutputAttnResProj);
  m.lm_head_bytes = bytes_of(ModelRole::kLmHead) + m.small_globals_bytes;
  m.embed_row_bytes = DTypeSize(ReleaseDType(ModelRole::kEmbedTokens)) * cfg.hidden_size;
  m.lm_head_row_bytes = DTypeSize(ReleaseDType(ModelRole::kLmHead)) * cfg.hidden_size;
  return m;
}

PlanModel NormalizedPlanModel(PlanModel m) {
  const int64_t V = std::max<int64_t>(m.cfg.vocab_size, 1);
  if (m.small_globals_bytes <= 0) m.small_globals_bytes = 0;
  m.small_globals_bytes = std::min(m.small_globals_bytes, m.lm_head_bytes);
  const int64_t lm_tensor = m.lm_head_bytes - m.small_globals_bytes;
  if (m.embed_row_bytes <= 0) m.embed_row_bytes = std::max<int64_t>(1, (m.embed_bytes + V - 1) / V);
  if (m.lm_head_row_bytes <= 0) m.lm_head_row_bytes = std::max<int64_t>(1, (lm_tensor + V - 1) / V);
  std::vector<int64_t> mins;
  for (int l = 0; l < static_cast<int>(m.trunk_bytes.size()); ++l) mins.push_back(LayerMinPieceSlot(m, l));
  m.min_piece_slot = mins;
  for (int i = 0; i < 4; ++i)
    if (m.globals_run[i] < 0)
      m.globals_run[i] = m.small_globals_bytes + ((i & 1) ? m.embed_bytes : 0) + ((i & 2) ? lm_tensor : 0);
  return m;
}

}  // namespace k3::plan
