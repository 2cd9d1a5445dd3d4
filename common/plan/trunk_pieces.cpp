#include "common/plan/trunk_pieces.h"

#include <algorithm>

#include "common/error.h"
#include "common/read_window.h"

namespace k3::plan {
namespace {

constexpr int64_t kPage = static_cast<int64_t>(kReadAlign);

// Most rows of `row_bytes` whose widened read fits `room` bytes (room a multiple of 4096):
// WidenedBytes(n * row_bytes) <= room  <=>  n * row_bytes <= room - 4096.
int64_t RowsThatFit(int64_t room, int64_t row_bytes) { return room > kPage ? (room - kPage) / row_bytes : 0; }

}  // namespace

std::vector<UseEntry> LayerUseOrder(const ModelConfig& cfg, int layer) {
  using R = TensorRole;
  const std::vector<R> all = LayerTrunkRoles(cfg, layer);  // also checks the layer index
  const bool kda = cfg.layer_kind.at(static_cast<size_t>(layer)) == MixerKind::KDA;
  const bool dense = cfg.is_dense(layer);
  std::vector<UseEntry> out;
  auto atomic = [&](std::initializer_list<R> roles) {
    for (R r : roles) out.push_back({r, false});
  };
  auto rows = [&](std::initializer_list<R> roles) {
    for (R r : roles) out.push_back({r, true});
  };
  atomic({R::kInputLayernorm, R::kPostAttentionLayernorm, R::kSelfAttentionResNorm, R::kSelfAttentionResProj,
          R::kMlpResNorm, R::kMlpResProj});
  if (kda) atomic({R::kKdaQConv1d, R::kKdaKConv1d, R::kKdaVConv1d, R::kKdaALog, R::kKdaDtBias, R::kKdaONorm});
  else atomic({R::kMlaQALayernorm, R::kMlaKvALayernorm});
  if (!dense) atomic({R::kMoeGateBias, R::kMoeLatentNorm});
  if (kda) {
    rows({R::kKdaQProj, R::kKdaKProj, R::kKdaVProj, R::kKdaBProj, R::kKdaFAProj, R::kKdaFBProj, R::kKdaGProj,
          R::kKdaOProj});
  } else {
    rows({R::kMlaQAProj, R::kMlaQBProj, R::kMlaKvAProjWithMqa, R::kMlaGProj});
    atomic({R::kMlaKvBProj});
    rows({R::kMlaOProj});
  }
  if (dense) {
    rows({R::kDenseGateProj, R::kDenseUpProj, R::kDenseDownProj});
  } else {
    rows({R::kMoeGate, R::kMoeLatentDown});
    if (cfg.num_shared_experts > 0) rows({R::kSharedGateProj, R::kSharedUpProj, R::kSharedDownProj});
    rows({R::kMoeLatentUp});
  }
  if (out.size() != all.size())  // a role added to LayerTrunkRoles must get a place here
    throw RuntimeFailure("trunk pieces: layer " + std::to_string(layer) + " use order has " +
                         std::to_string(out.size()) + " tensors, the trunk " + std::to_string(all.size()));
  return out;
}

int64_t PieceRunSlotBytes(const std::vector<PieceTensor>& tensors, const PieceRun& r) {
  return WidenedBytes(r.rows * tensors.at(static_cast<size_t>(r.tensor)).row_bytes);
}

int64_t MinPieceSlot(const std::vector<PieceTensor>& tensors) {
  int64_t need = kPage;
  for (const PieceTensor& t : tensors)
    need = std::max(need, WidenedBytes(t.splittable ? t.row_bytes : t.bytes()));
  return need;
}

std::vector<Piece> LayerPieces(const std::vector<PieceTensor>& tensors, int64_t run_bytes, int64_t slot_bytes) {
  for (const PieceTensor& t : tensors)
    if (t.rows < 1 || t.row_bytes < 1)
      throw UsageError("trunk pieces: tensor " + t.name + " has no rows or no bytes");
  const int64_t slot = AlignDown(slot_bytes);
  if (slot < MinPieceSlot(tensors))
    throw UsageError("trunk pieces: ring slots of " + std::to_string(slot_bytes) + " bytes are below the " +
                     std::to_string(MinPieceSlot(tensors)) + " this layer needs (its largest atomic tensor or widest row)");
  std::vector<Piece> out;
  if (WidenedBytes(run_bytes) <= slot) {  // the whole layer in one read, as without pieces
    Piece p;
    p.whole_run = true;
    for (size_t i = 0; i < tensors.size(); ++i) p.runs.push_back({static_cast<int>(i), 0, tensors[i].rows});
    out.push_back(std::move(p));
    return out;
  }
  Piece cur;
  int64_t used = 0;  // slot bytes taken by cur's runs (a multiple of 4096)
  auto flush = [&] {
    if (!cur.runs.empty()) out.push_back(std::move(cur));
    cur = Piece{};
    used = 0;
  };
  for (size_t i = 0; i < tensors.size(); ++i) {
    const PieceTensor& t = tensors[i];
    const int idx = static_cast<int>(i);
    if (!t.splittable) {
      if (used + WidenedBytes(t.bytes()) > slot) flush();
      cur.runs.push_back({idx, 0, t.rows});
      used += WidenedBytes(t.bytes());
      continue;
    }
    int64_t row0 = 0;
    while (row0 < t.rows) {
      int64_t n = std::min(t.rows - row0, RowsThatFit(slot - used, t.row_bytes));
      if (n < 1) {  // not one more row fits: the next piece (which holds at least one row)
        flush();
        continue;
      }
      cur.runs.push_back({idx, row0, n});
      used += WidenedBytes(n * t.row_bytes);
      row0 += n;
    }
  }
  flush();
  return out;
}

std::vector<PieceTensor> LayerPieceTensors(const Checkpoint& ck, const ModelConfig& cfg, int layer) {
  std::vector<PieceTensor> out;
  for (const UseEntry& e : LayerUseOrder(cfg, layer)) {
    const std::string name = LayerTensorName(layer, e.role);
    const TensorInfo& t = ck.at(name);
    PieceTensor p;
    p.name = name;
    p.offset = t.file_offset;
    p.splittable = e.splittable && !t.shape.empty() && t.shape[0] > 1;
    p.rows = p.splittable ? t.shape[0] : 1;
    p.row_bytes = t.nbytes / p.rows;
    if (p.rows * p.row_bytes != t.nbytes)
      throw BadModel("tensor " + name + ": " + std::to_string(t.nbytes) + " bytes are not whole rows");
    out.push_back(std::move(p));
  }
  return out;
}

std::vector<PieceTensor> ReleasePieceTensors(const ModelConfig& cfg, int layer) {
  std::vector<PieceTensor> out;
  for (const UseEntry& e : LayerUseOrder(cfg, layer)) {
    const std::vector<int64_t> shape = ExpectedShape(cfg, e.role);
    int64_t bytes = DTypeSize(ReleaseDType(e.role));
    for (int64_t d : shape) bytes *= d;
    PieceTensor p;
    p.name = LayerTensorName(layer, e.role);
    p.splittable = e.splittable && !shape.empty() && shape[0] > 1;
    p.rows = p.splittable ? shape[0] : 1;
    p.row_bytes = std::max<int64_t>(bytes / p.rows, 1);
    out.push_back(std::move(p));
  }
  return out;
}

int64_t TrunkSlotBytes(int64_t widest_streamed, int64_t min_piece, int64_t trunk_piece, int64_t coded_margin) {
  if (widest_streamed <= 0) return 0;
  if (trunk_piece == kTrunkPieceLayer) return widest_streamed + coded_margin;
  const int64_t slot = std::min(widest_streamed, std::max(AlignUp(trunk_piece), min_piece));
  return slot == widest_streamed ? slot + coded_margin : slot;
}

int TrunkRingSlots(int64_t slot, int64_t widest_streamed, int64_t read_ahead, int ring_slots) {
  if (ring_slots > 0) return ring_slots;
  if (slot <= 0 || slot >= widest_streamed) return 2;
  // Never more read ahead than one whole layer: the whole-layer ring reads no further.
  const int64_t bytes = std::min(std::max<int64_t>(read_ahead, 0), widest_streamed);
  const int64_t ahead = (bytes + slot - 1) / slot;
  return static_cast<int>(std::clamp<int64_t>(1 + ahead, 2, 1024));
}

std::vector<RunPlacement> PiecePlacements(const std::vector<PieceTensor>& tensors, const Piece& piece) {
  std::vector<RunPlacement> out;
  int64_t at = 0;
  for (const PieceRun& r : piece.runs) {
    const PieceTensor& t = tensors.at(static_cast<size_t>(r.tensor));
    out.push_back({t.offset + r.row0 * t.row_bytes, r.rows * t.row_bytes, at});
    at += PieceRunSlotBytes(tensors, r);
  }
  return out;
}

int64_t PieceSlotBytes(const std::vector<PieceTensor>& tensors, const Piece& piece, int64_t run_bytes) {
  if (piece.whole_run) return WidenedBytes(run_bytes);
  int64_t n = 0;
  for (const PieceRun& r : piece.runs) n += PieceRunSlotBytes(tensors, r);
  return n;
}

}  // namespace k3::plan
