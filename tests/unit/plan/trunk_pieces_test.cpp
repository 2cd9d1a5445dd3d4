// common/plan/trunk_pieces.h: a layer cut into ring-slot pieces (docs/trunk-pieces.md).
// Properties, not copied numbers: every piece fits its slot, every tensor's rows arrive exactly
// once and in use order, atomic tensors are never cut, row blocks are as large as the room
// allows, and a layer whose run fits a slot is one whole-run piece (today's read).
#include "common/plan/trunk_pieces.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/model_config.h"
#include "common/read_window.h"
#include "common/tensor_names.h"

namespace k3::plan {
namespace {

// The release layer's tensors from config + release dtypes in LayerUseOrder, packed back to
// back (offsets do not matter to LayerPieces).
std::vector<PieceTensor> ReleaseLayer(const ModelConfig& cfg, int layer, int64_t* run_bytes) {
  std::vector<PieceTensor> out;
  int64_t at = 0;
  for (const UseEntry& e : LayerUseOrder(cfg, layer)) {
    const std::vector<int64_t> shape = ExpectedShape(cfg, e.role);
    int64_t numel = 1;
    for (int64_t d : shape) numel *= d;
    const int64_t bytes = numel * DTypeSize(ReleaseDType(e.role));
    PieceTensor t;
    t.name = LayerTensorName(layer, e.role);
    t.offset = at;
    t.rows = e.splittable ? shape[0] : 1;
    t.row_bytes = bytes / t.rows;
    t.splittable = e.splittable;
    out.push_back(t);
    at += bytes;
  }
  *run_bytes = at;
  return out;
}

ModelConfig Release() { return LoadModelConfig(std::string(K3_RELEASE_DATA_DIR) + "/config.json"); }

// Checks every invariant of LayerPieces' answer for one slot size.
void CheckPieces(const std::vector<PieceTensor>& t, int64_t run_bytes, int64_t slot) {
  SCOPED_TRACE("slot " + std::to_string(slot));
  const std::vector<Piece> pieces = LayerPieces(t, run_bytes, slot);
  ASSERT_FALSE(pieces.empty());
  size_t tensor = 0;
  int64_t next_row = 0;
  for (size_t p = 0; p < pieces.size(); ++p) {
    ASSERT_FALSE(pieces[p].runs.empty());
    int64_t used = 0;
    for (const PieceRun& r : pieces[p].runs) {
      // Rows continue where the previous run stopped, tensor by tensor in use order.
      if (next_row == t[tensor].rows) {
        ++tensor;
        next_row = 0;
      }
      ASSERT_EQ(static_cast<size_t>(r.tensor), tensor);
      ASSERT_EQ(r.row0, next_row);
      ASSERT_GE(r.rows, 1);
      if (!t[tensor].splittable) {
        EXPECT_EQ(r.rows, t[tensor].rows) << t[tensor].name << " was cut";
      }
      next_row += r.rows;
      used += PieceRunSlotBytes(t, r);
    }
    if (!pieces[p].whole_run) {
      EXPECT_LE(used, AlignDown(slot)) << "piece " << p;
    } else {
      EXPECT_LE(WidenedBytes(run_bytes), AlignDown(slot));
    }
    // A row block that ends a piece while its tensor goes on could not have taken one more row.
    const PieceRun& last = pieces[p].runs.back();
    const PieceTensor& lt = t[static_cast<size_t>(last.tensor)];
    if (lt.splittable && last.row0 + last.rows < lt.rows) {
      const int64_t before = used - PieceRunSlotBytes(t, last);
      EXPECT_GT(before + WidenedBytes((last.rows + 1) * lt.row_bytes), AlignDown(slot)) << "piece " << p;
    }
  }
  EXPECT_EQ(tensor, t.size() - 1);
  EXPECT_EQ(next_row, t.back().rows);
}

TEST(TrunkPieces, UseOrderIsAPermutationWithSmallTensorsFirst) {
  const ModelConfig cfg = Release();
  for (int layer = 0; layer < cfg.num_layers; ++layer) {
    SCOPED_TRACE("layer " + std::to_string(layer));
    const auto order = LayerUseOrder(cfg, layer);
    std::vector<TensorRole> roles = LayerTrunkRoles(cfg, layer), used;
    for (const UseEntry& e : order) used.push_back(e.role);
    std::sort(roles.begin(), roles.end());
    std::sort(used.begin(), used.end());
    EXPECT_EQ(used, roles);
    bool seen_matrix = false;
    for (const UseEntry& e : order) {
      const std::vector<int64_t> shape = ExpectedShape(cfg, e.role);
      // Row blocks only for matrices of more than one row that only kern::Matmul reads:
      // everything 2-D except the [1][H] res projections and MLA's kv_b (per-head reads).
      const bool matrix = shape.size() == 2 && shape[0] > 1 && e.role != TensorRole::kMlaKvBProj;
      EXPECT_EQ(e.splittable, matrix) << LayerTensorName(layer, e.role);
      if (e.splittable) seen_matrix = true;
      if (!e.splittable && e.role != TensorRole::kMlaKvBProj) {
        EXPECT_FALSE(seen_matrix) << LayerTensorName(layer, e.role) << " comes after a matrix";
      }
    }
  }
}

TEST(TrunkPieces, ReleaseLayersAtManySlotSizes) {
  const ModelConfig cfg = Release();
  for (int layer : {0, 1, 3}) {  // KDA + dense MLP, KDA + MoE, MLA + MoE (one-based 4)
    SCOPED_TRACE("layer " + std::to_string(layer));
    int64_t run = 0;
    const auto t = ReleaseLayer(cfg, layer, &run);
    const int64_t min = MinPieceSlot(t);
    for (int64_t slot : {min, min + 4095, int64_t{1} << 20, int64_t{16} << 20, int64_t{64} << 20,
                         int64_t{256} << 20, WidenedBytes(run) - 1, WidenedBytes(run)})
      if (slot >= min) CheckPieces(t, run, slot);  // (MLA's minimum is kv_b, above 16 MiB)
  }
}

TEST(TrunkPieces, WholeRunWhenTheLayerFits) {
  const ModelConfig cfg = Release();
  int64_t run = 0;
  const auto t = ReleaseLayer(cfg, 0, &run);
  const auto one = LayerPieces(t, run, WidenedBytes(run));
  ASSERT_EQ(one.size(), 1u);
  EXPECT_TRUE(one[0].whole_run);
  // One byte less and the layer is cut: more than one piece, none of them a whole run.
  const auto cut = LayerPieces(t, run, WidenedBytes(run) - 1);
  EXPECT_GT(cut.size(), 1u);
  for (const Piece& p : cut) EXPECT_FALSE(p.whole_run);
}

TEST(TrunkPieces, DenseMlpOfLayerZeroIsCutIntoRowBlocks) {
  // Layer 0's 33,792-wide dense MLP: with 64 MiB slots each of its three matrices spans
  // several pieces, and no piece exceeds the slot.
  const ModelConfig cfg = Release();
  int64_t run = 0;
  const auto t = ReleaseLayer(cfg, 0, &run);
  const int64_t slot = int64_t{64} << 20;
  const auto pieces = LayerPieces(t, run, slot);
  EXPECT_GE(static_cast<int64_t>(pieces.size()), run / slot);
  for (TensorRole role : {TensorRole::kDenseGateProj, TensorRole::kDenseUpProj, TensorRole::kDenseDownProj}) {
    const std::string name = LayerTensorName(0, role);
    int blocks = 0;
    for (const Piece& p : pieces)
      for (const PieceRun& r : p.runs)
        if (t[static_cast<size_t>(r.tensor)].name == name) ++blocks;
    EXPECT_GT(blocks, 1) << name;
  }
}

TEST(TrunkPieces, MinimumSlotIsTheWidestRowOrLargestAtomicTensor) {
  const ModelConfig cfg = Release();
  int64_t run = 0;
  const auto dense = ReleaseLayer(cfg, 0, &run);
  // Layer 0: the larger of the dense down projection's row (intermediate_size BF16 values)
  // and the atomic F32 conv taps [P][1][K].
  EXPECT_EQ(MinPieceSlot(dense), std::max(WidenedBytes(cfg.intermediate_size * 2),
                                          WidenedBytes(cfg.kda_proj() * cfg.conv_kernel * 4)));
  EXPECT_THROW(LayerPieces(dense, run, MinPieceSlot(dense) - 4096), Error);
  const auto mla = ReleaseLayer(cfg, 3, &run);
  ASSERT_EQ(cfg.layer_kind[3], MixerKind::MLA);
  // MLA's kv_b is atomic and larger than any row.
  const int64_t kv_b = cfg.mla_heads * (cfg.qk_nope_head_dim + cfg.v_head_dim) * cfg.kv_lora_rank * 2;
  EXPECT_EQ(MinPieceSlot(mla), WidenedBytes(kv_b));
}

TEST(TrunkPieces, BadInputIsAUsageError) {
  std::vector<PieceTensor> t = {{"a", 0, 4, 100, true}, {"b", 400, 0, 8, false}};
  try {
    LayerPieces(t, 1 << 20, 1 << 20);
    FAIL() << "a tensor without rows was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), kExitUsage);
  }
}

}  // namespace
}  // namespace k3::plan
