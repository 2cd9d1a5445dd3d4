// What k3-launch knows about a checkpoint before anything is loaded: the config, the byte
// runs of every layer's trunk and of the globals (from the shard headers), and the inputs of
// the memory plan. With --dry-run and no shards present, the index alone is enough: sizes
// then come from the config and the release dtypes.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "common/model_config.h"
#include "common/plan/memory_plan.h"
#include "common/tensor_names.h"

namespace k3::launch {

struct ModelLayout {
  ModelConfig cfg;
  plan::PlanModel plan_model;
  bool from_headers = false;         // false: config + index only (dry run)
  std::vector<ByteRange> trunk;      // per layer (from headers)
  ByteRange globals;                 // pseudo-layer num_layers (docs/pipeline.md)
  int64_t num_tensors = 0;
  double disk_raw_rate = 0;          // --disk-rate probe: O_DIRECT bytes/s of these shards (0: none ran)
};

// Throws BadModel / UsageError. `allow_index_only`: fall back to the index when shards are absent.
ModelLayout LoadModelLayout(const std::string& dir, bool allow_index_only);

// With a coded trunk (option coded_trunk): checks it against the checkpoint (BadModel, exit 3,
// one line) and gives the plan each layer's coded read bytes (PlanModel::coded_trunk_bytes).
void UseCodedTrunk(ModelLayout& m, const std::string& model_dir, const std::string& coded_dir);

}  // namespace k3::launch
