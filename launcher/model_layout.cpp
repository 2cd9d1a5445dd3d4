#include "model_layout.h"

#include <algorithm>
#include <filesystem>

#include "common/codec/coded_fill.h"
#include "common/error.h"
#include "common/safetensors.h"

namespace k3::launch {
namespace fs = std::filesystem;

namespace {

std::string IndexPath(const std::string& dir) {
  for (const char* n : {"model.safetensors.index.json", "model.safetensors.index.json.gz"})
    if (fs::exists(fs::path(dir) / n)) return (fs::path(dir) / n).string();
  return {};
}

// True when every shard the index names is present (or the checkpoint is a single file).
bool ShardsPresent(const std::string& dir, const SafetensorsIndex* idx) {
  if (!idx) return fs::exists(fs::path(dir) / "model.safetensors");
  for (const auto& [name, file] : idx->weight_map)
    if (!fs::exists(fs::path(dir) / file)) return false;
  return true;
}

}  // namespace

ModelLayout LoadModelLayout(const std::string& dir, bool allow_index_only) {
  if (!fs::is_directory(dir)) throw BadModel("model directory " + dir + " does not exist");
  ModelLayout m;
  m.cfg = LoadModelConfig((fs::path(dir) / "config.json").string());
  const std::string index_path = IndexPath(dir);
  std::optional<SafetensorsIndex> idx;
  if (!index_path.empty()) idx = LoadSafetensorsIndex(index_path);

  if (!ShardsPresent(dir, idx ? &*idx : nullptr)) {
    if (!allow_index_only || !idx)
      throw BadModel(dir + ": shards missing (only --dry-run can plan from the index alone)");
    // Every tensor the config implies must at least be named by the index.
    for (int l = 0; l < m.cfg.num_layers; ++l)
      for (const std::string& n : LayerTrunkNames(m.cfg, l))
        if (!idx->weight_map.count(n)) throw BadModel(index_path + ": tensor " + n + " not in the index");
    for (ModelRole r : kModelRoles)
      if (!idx->weight_map.count(ModelTensorName(r)))
        throw BadModel(index_path + ": tensor " + ModelTensorName(r) + " not in the index");
    m.num_tensors = static_cast<int64_t>(idx->weight_map.size());
    m.plan_model = plan::PlanModelFromConfig(m.cfg);
    return m;
  }

  const Checkpoint ck = Checkpoint::Open(dir);
  ValidateCheckpoint(ck, m.cfg);
  m.from_headers = true;
  m.num_tensors = static_cast<int64_t>(ck.all().size());
  plan::PlanModel& pm = m.plan_model;
  pm.cfg = m.cfg;
  for (int l = 0; l < m.cfg.num_layers; ++l) {
    m.trunk.push_back(LayerTrunkRange(ck, m.cfg, l));
    pm.trunk_bytes.push_back(m.trunk.back().end - m.trunk.back().begin);
    pm.min_piece_slot.push_back(plan::MinPieceSlot(plan::LayerPieceTensors(ck, m.cfg, l)));
  }
  int64_t expert = 0;
  for (int l = static_cast<int>(m.cfg.first_k_dense_replace); l < m.cfg.num_layers; ++l)
    for (int e = 0; e < m.cfg.num_experts; ++e) {
      const ByteRange r = ExpertRange(ck, l, e);
      expert = std::max(expert, r.end - r.begin);
    }
  pm.expert_bytes = expert;
  m.globals = GlobalsRange(ck);
  for (ModelRole r : kModelRoles) {
    const TensorInfo& t = ck.at(ModelTensorName(r));
    if (r == ModelRole::kEmbedTokens) pm.embed_bytes = t.nbytes;
    else pm.lm_head_bytes += t.nbytes;
    if (r != ModelRole::kEmbedTokens && r != ModelRole::kLmHead) pm.small_globals_bytes += t.nbytes;
  }
  const TensorInfo& embed = ck.at(ModelTensorName(ModelRole::kEmbedTokens));
  const TensorInfo& head = ck.at(ModelTensorName(ModelRole::kLmHead));
  pm.embed_row_bytes = embed.nbytes / std::max<int64_t>(m.cfg.vocab_size, 1);
  pm.lm_head_row_bytes = head.nbytes / std::max<int64_t>(m.cfg.vocab_size, 1);
  // The pinned globals run is [min, max) of the model-level tensors kept resident, so the
  // plan charges what the trunk reader will really read (whatever the file order).
  for (int combo = 0; combo < 4; ++combo) {
    const ByteRange g = GlobalsRange(ck, {(combo & 1) != 0, (combo & 2) != 0});
    pm.globals_run[combo] = g.end - g.begin;
  }
  return m;
}

void UseCodedTrunk(ModelLayout& m, const std::string& model_dir, const std::string& coded_dir) {
  if (!m.from_headers) throw UsageError("coded_trunk needs the checkpoint's shards, not the index alone");
  const Checkpoint ck = Checkpoint::Open(model_dir);
  const codec::CodedTrunk t = codec::OpenCodedTrunk(coded_dir, ck, m.cfg);
  const std::vector<codec::LayerRuns> layers = codec::RunsByLayer(t);
  m.plan_model.coded_trunk_bytes.clear();
  for (int l = 0; l < m.cfg.num_layers; ++l)
    m.plan_model.coded_trunk_bytes.push_back(
        static_cast<int64_t>(codec::CodedReadBytes(t, layers[static_cast<size_t>(l)])));
}

}  // namespace k3::launch
