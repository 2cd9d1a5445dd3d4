// PipelineLayerSource (pipeline_sources.h), a streamed layer cut into pieces at the ring's slot
// size (docs/trunk-pieces.md): checking its announcement, binding it from copies of its small
// tensors, and the cursor that hands each big tensor's rows out piece by piece.
#include "pipeline_sources.h"

#include <algorithm>
#include <cstring>
#include <span>

#include "common/error.h"
#include "common/row_tile.h"
#include "common/tensor_names.h"

namespace k3::compute {

bool PipelineLayerSource::Pieced(int64_t layer) const {
  const auto& p = pieces_.at(static_cast<size_t>(layer));
  return p.size() > 1 || (p.size() == 1 && !p[0].whole_run);
}

void PipelineLayerSource::CheckPieces(const ipc::weights::LayerReady& r) const {
  if (r.slot < 0 || r.layer >= cfg_.num_layers) return;  // pinned, globals, lm_head chunks: one piece
  const auto expected = static_cast<int32_t>(pieces_.at(static_cast<size_t>(r.layer)).size());
  if (r.pieces != expected)
    throw RuntimeFailure("trunk reader: layer " + std::to_string(r.layer) + " has " + std::to_string(r.pieces) +
                         " pieces, compute expects " + std::to_string(expected));
}

// Takes piece `piece` of the cursor's layer into the cursor (the previous one is released).
void PipelineLayerSource::TakePiece(int32_t piece) {
  ReleasePiece();
  const plan::Piece& p = pieces_[static_cast<size_t>(cur_.layer)].at(static_cast<size_t>(piece));
  for (;;) {
    const ipc::weights::LayerReady r = WaitFor(cur_.layer, piece);
    CheckPieces(r);
    const auto span = r.slot >= 0 ? ring_.Read({static_cast<uint32_t>(r.slot), r.generation})
                                  : std::span<const uint8_t>{};
    const int64_t need = plan::PieceSlotBytes(tensors_[static_cast<size_t>(cur_.layer)], p, 0);
    if (span.empty()) {  // refilled under us, or a pinned answer to a piece: ask again
      ++c_.stale_refs;
      ready_.erase({cur_.layer, piece});
      continue;
    }
    if (r.offset != 0 || r.length != static_cast<uint64_t>(need) || span.size() < static_cast<size_t>(need))
      throw RuntimeFailure("trunk reader: layer " + std::to_string(cur_.layer) + " piece " + std::to_string(piece) +
                           " announced with " + std::to_string(r.length) + " bytes, compute expects " +
                           std::to_string(need));
    cur_.piece = piece;
    cur_.run = 0;
    cur_.held = r;
    cur_.base = span.data();
    cur_.places = plan::PiecePlacements(tensors_[static_cast<size_t>(cur_.layer)], p);
    c_.trunk_streamed_bytes += r.length;
    return;
  }
}

void PipelineLayerSource::ReleasePiece() {
  if (!cur_.held) return;
  if (!Usable(*cur_.held)) ++c_.stale_refs;
  const auto& h = *cur_.held;
  ipc::SendMessage(sock_, ipc::Encode(ipc::weights::LayerDone{h.layer, h.slot, h.generation, h.piece}));
  ready_.erase({h.layer, h.piece});
  cur_.held.reset();
  cur_.base = nullptr;
}

void PipelineLayerSource::EndPieced() {
  ReleasePiece();
  cur_ = PieceCursor{};
  small_.clear();
}

// The run at the cursor, taking the next piece when the held one is used up; it must be the
// next rows of `role` (a different tensor is a bug in the use-order table, not input).
const plan::PieceRun& PipelineLayerSource::NextRun(int64_t layer, TensorRole role) {
  const auto& pieces = pieces_.at(static_cast<size_t>(layer));
  if (cur_.layer != layer || cur_.piece < 0) throw RuntimeFailure("layer " + std::to_string(layer) + ": piece order");
  if (!cur_.held || cur_.run == pieces[static_cast<size_t>(cur_.piece)].runs.size()) {
    if (cur_.piece + 1 >= static_cast<int32_t>(pieces.size()))
      throw RuntimeFailure("layer " + std::to_string(layer) + ": piece order (past the last piece)");
    TakePiece(cur_.piece + 1);
  }
  const plan::PieceRun& run = pieces[static_cast<size_t>(cur_.piece)].runs[cur_.run];
  if (roles_[static_cast<size_t>(layer)][static_cast<size_t>(run.tensor)] != role)
    throw RuntimeFailure("layer " + std::to_string(layer) + ": piece order (" +
                         tensors_[static_cast<size_t>(layer)][static_cast<size_t>(run.tensor)].name + " is next, not " +
                         LayerTensorName(static_cast<int>(layer), role) + ")");
  return run;
}

const LayerWeights& PipelineLayerSource::BeginPieced(int32_t layer) {
  // The small group (the atomic tensors at the head of the use order) is copied out: BindLayer
  // widens it, and it may span pieces.
  const auto& tensors = tensors_[static_cast<size_t>(layer)];
  const auto& pieces = pieces_[static_cast<size_t>(layer)];
  size_t small = 0;
  while (small < tensors.size() && !tensors[small].splittable && roles_[static_cast<size_t>(layer)][small] != TensorRole::kMlaKvBProj)
    ++small;
  for (;;) {
    cur_ = PieceCursor{};
    cur_.layer = layer;
    small_.clear();
    TakePiece(0);
    bool stale = false;
    for (size_t i = 0; i < small && !stale; ++i) {
      if (cur_.run == pieces[static_cast<size_t>(cur_.piece)].runs.size()) {
        if (!Usable(*cur_.held)) {
          stale = true;
          break;
        }
        TakePiece(cur_.piece + 1);
      }
      const plan::PieceRun& run = pieces[static_cast<size_t>(cur_.piece)].runs[cur_.run];
      if (run.tensor != static_cast<int>(i)) throw RuntimeFailure("layer " + std::to_string(layer) + ": piece order");
      const plan::RunPlacement& pl = cur_.places[cur_.run];
      const uint8_t* at = cur_.base + pl.slot_offset + pl.lead();
      small_[static_cast<int>(i)].assign(at, at + pl.length);
      ++cur_.run;
    }
    if (!stale && Usable(*cur_.held)) break;
    // A restarted reader bumped the generation while we copied: drop the piece, start again.
    ++c_.stale_refs;
    ready_.erase({layer, cur_.piece});
    cur_.held.reset();
  }
  std::map<std::string, int> index;
  for (size_t i = 0; i < small; ++i) index[tensors[i].name] = static_cast<int>(i);
  static const uint8_t kShapeOnly = 0;  // matrices: bound for shape and dtype, read through Apply
  current_ = BindLayer(cfg_, layer, [&](const std::string& name) {
    const auto it = index.find(name);
    return RawTensor{it == index.end() ? &kShapeOnly : small_.at(it->second).data(), &ck_.at(name)};
  });
  const TrunkRef ref{this, layer};
  current_.kda.trunk = current_.mla.trunk = current_.moe.trunk = ref;
  current_.dense_ffn.trunk = current_.moe.shared.trunk = ref;
  return current_;
}

void PipelineLayerSource::Apply(int64_t layer, TensorRole role, const kern::DenseMat& W, const float* X, int64_t T,
                                float* Y) {
  int64_t done = 0;  // rows of W computed
  while (done < W.rows) {
    const plan::PieceRun& run = NextRun(layer, role);
    const plan::PieceTensor& t = tensors_[static_cast<size_t>(layer)][static_cast<size_t>(run.tensor)];
    const int64_t r0 = t.splittable ? run.row0 : 0, n = t.splittable ? run.rows : W.rows;
    if (r0 != done || r0 + n > W.rows) throw RuntimeFailure("layer " + std::to_string(layer) + ": piece order (rows)");
    const plan::RunPlacement& pl = cur_.places[cur_.run];
    const kern::DenseMat view{cur_.base + pl.slot_offset + pl.lead(), W.format, n, W.cols};
    if (T == 1 || n == W.rows) {
      kern::Matmul(view, X, T, Y + (T == 1 ? r0 : 0));
    } else {  // Matmul writes [rows][n]; scatter into [T][W.rows], kRowTile rows at a time
      for (int64_t t0 = 0; t0 < T; t0 += kRowTile) {
        const int64_t m = std::min(kRowTile, T - t0);
        block_out_.resize(static_cast<size_t>(m * n));
        kern::Matmul(view, X + t0 * W.cols, m, block_out_.data());
        for (int64_t i = 0; i < m; ++i)
          std::memcpy(Y + (t0 + i) * W.rows + r0, block_out_.data() + i * n, static_cast<size_t>(n) * sizeof(float));
      }
    }
    done += n;
    ++cur_.run;
  }
  // A piece used up goes back at once, so the reader can refill its slot while compute works.
  if (cur_.held && cur_.run == pieces_[static_cast<size_t>(layer)][static_cast<size_t>(cur_.piece)].runs.size())
    ReleasePiece();
}

kern::DenseMat PipelineLayerSource::Whole(int64_t layer, TensorRole role, const kern::DenseMat& W) {
  const plan::PieceRun& run = NextRun(layer, role);
  const plan::PieceTensor& t = tensors_[static_cast<size_t>(layer)][static_cast<size_t>(run.tensor)];
  if (t.splittable && (run.row0 != 0 || run.rows != W.rows))
    throw RuntimeFailure("layer " + std::to_string(layer) + ": " + t.name + " must arrive whole");
  const plan::RunPlacement& pl = cur_.places[cur_.run];
  ++cur_.run;  // its piece stays held until the next Apply takes another
  return {cur_.base + pl.slot_offset + pl.lead(), W.format, W.rows, W.cols};
}

}  // namespace k3::compute
