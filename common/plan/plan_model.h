// What the memory plan needs to know of the model, independent of the budget: byte sizes of
// each layer's trunk run, one expert, the embedding and lm_head, measured from the shard
// headers (launcher/model_layout.cpp) or derived from the config alone.
#pragma once
#include <cstdint>
#include <vector>

#include "common/model_config.h"

namespace k3::plan {

struct PlanModel {
  ModelConfig cfg;
  std::vector<int64_t> trunk_bytes;  // per layer: the layer's trunk run (non-expert tensors)
  // Per layer: MinPieceSlot of its tensors (empty: from the config's release shapes, capped at
  // the widened layer).
  std::vector<int64_t> min_piece_slot;
  int64_t expert_bytes = 0;          // one routed expert (six tensors)
  int64_t embed_bytes = 0;           // embed_tokens
  int64_t lm_head_bytes = 0;         // lm_head (+ final norms, read with it)
  // Optional (0 / -1 = derived from the sizes above, assuming the globals are contiguous):
  int64_t small_globals_bytes = 0;   // norm + output_attn_res_* (always pinned)
  int64_t embed_row_bytes = 0;       // one embedding row
  int64_t lm_head_row_bytes = 0;     // one lm_head row
  // Bytes of the pinned globals run ([min, max) of the tensors kept resident, from the shard
  // headers) by (embed resident ? 1 : 0) | (lm_head resident ? 2 : 0).
  int64_t globals_run[4] = {-1, -1, -1, -1};
  // With a coded trunk (launch option coded_trunk): per layer, its coded runs' bytes as read
  // (empty: none). Whole streamed layers then read these and ring slots get kCodedSlotMargin.
  std::vector<int64_t> coded_trunk_bytes;
};

// MinPieceSlot of layer `layer` (from min_piece_slot, else the config's release shapes), capped
// at the widened layer: the smallest ring slot the layer can stream through.
int64_t LayerMinPieceSlot(const PlanModel& m, int layer);

// Builds PlanModel from a config alone, with release dtypes (common/tensor_names.h).
PlanModel PlanModelFromConfig(const ModelConfig& cfg);

// `m` with its optional fields filled in from the required ones (row sizes, the globals runs,
// every layer's MinPieceSlot): what the plan computes with.
PlanModel NormalizedPlanModel(PlanModel m);

}  // namespace k3::plan
