#include "services/trunk_reader/trunk_layout.h"

#include <algorithm>
#include <filesystem>

#include "common/error.h"
#include "common/id_list.h"
#include "common/plan/head_stream.h"
#include "common/tensor_names.h"

namespace k3::svc {

TrunkLayout BuildTrunkLayout(const Checkpoint& ck, const ModelConfig& cfg, GlobalsSet set) {
  TrunkLayout out;
  out.num_layers = static_cast<int>(cfg.num_layers);
  std::vector<uint64_t> sizes;
  for (const auto& p : ck.shard_paths()) sizes.push_back(std::filesystem::file_size(p));
  out.shard_sizes = sizes;
  for (int l = 0; l < out.num_layers; ++l) {
    const ByteRange r = LayerTrunkRange(ck, cfg, l);
    out.runs.push_back(Widen(r, sizes.at(static_cast<size_t>(r.shard))));
    out.tensors.push_back(plan::LayerPieceTensors(ck, cfg, l));
  }
  const ByteRange g = GlobalsRange(ck, set);
  out.runs.push_back(Widen(g, sizes.at(static_cast<size_t>(g.shard))));
  return out;
}

void AppendLmHeadChunks(TrunkLayout& layout, const Checkpoint& ck, const ModelConfig& cfg, uint64_t slot_bytes) {
  const TensorInfo& t = ck.at(ModelTensorName(ModelRole::kLmHead));
  const int64_t V = cfg.vocab_size;
  const int64_t row = t.nbytes / std::max<int64_t>(V, 1);
  const int64_t rows = plan::LmHeadChunkRows(static_cast<int64_t>(slot_bytes), row, V);
  if (rows < 1)
    throw RuntimeFailure("ring slots of " + std::to_string(slot_bytes) + " bytes cannot hold one lm_head row of " +
                         std::to_string(row) + " bytes");
  const uint64_t file_size = std::filesystem::file_size(ck.shard_paths().at(static_cast<size_t>(t.shard)));
  layout.lm_chunk_rows = rows;
  layout.lm_chunks = static_cast<int>(plan::LmHeadChunks(rows, V));
  for (int c = 0; c < layout.lm_chunks; ++c) {
    const int64_t r0 = c * rows, r1 = std::min(V, r0 + rows);
    const ByteRange r{t.shard, t.file_offset + r0 * row, t.file_offset + r1 * row, (r1 - r0) * row};
    layout.runs.push_back(Widen(r, file_size));
  }
}

void CutPieces(TrunkLayout& layout, const std::vector<int>& pinned, uint64_t slot_bytes) {
  layout.pieces.clear();
  for (int l = 0; l < layout.num_layers; ++l) {
    const auto& t = layout.tensors.at(static_cast<size_t>(l));
    const ReadRun& r = layout.runs[static_cast<size_t>(l)];
    if (std::binary_search(pinned.begin(), pinned.end(), l)) {
      plan::Piece whole;
      whole.whole_run = true;
      layout.pieces.push_back({whole});
      continue;
    }
    if (static_cast<int64_t>(slot_bytes) < plan::MinPieceSlot(t))
      throw RuntimeFailure("ring slots hold " + std::to_string(slot_bytes) + " bytes, streamed layer " +
                           std::to_string(l) + " needs at least " + std::to_string(plan::MinPieceSlot(t)) +
                           " (its largest atomic tensor or widest row)");
    layout.pieces.push_back(plan::LayerPieces(t, static_cast<int64_t>(r.length()), static_cast<int64_t>(slot_bytes)));
  }
  layout.walk.clear();
  layout.first_pos.clear();
  for (int run = 0; run < layout.runs_count(); ++run) {
    layout.first_pos.push_back(static_cast<int>(layout.walk.size()));
    for (int p = 0; p < layout.pieces_of(run); ++p) layout.walk.push_back({run, p});
  }
}

std::vector<int> ParsePinList(const std::string& text, int num_layers) {
  std::vector<int> out;
  for (int64_t l : ParseIdList(text, "--pin", num_layers)) out.push_back(static_cast<int>(l));
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::vector<PinnedEntry> PlanPinned(const TrunkLayout& layout, const std::vector<int>& pinned, uint64_t* total) {
  std::vector<int> order = pinned;
  std::sort(order.begin(), order.end());
  order.push_back(layout.globals());
  std::vector<PinnedEntry> out;
  uint64_t at = 0;
  for (int l : order) {
    const ReadRun& r = layout.runs.at(static_cast<size_t>(l));
    out.push_back({l, at, at + r.lead(), r.length()});
    at = AlignUp(at + r.wlength());
  }
  if (total) *total = at;
  return out;
}

}  // namespace k3::svc
