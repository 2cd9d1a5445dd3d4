// Trunk pieces (docs/trunk-pieces.md): how one streamed layer is cut into pieces
// that each fit one trunk-ring slot. A piece is a list of runs read into one slot; a run is
// whole rows of one tensor, never a column block, so every output of a row-wise matrix product
// is the same dot product whatever piece its row arrives in (kernels/matmul.h determinism
// contract). Pure: the plan, the launcher, the trunk reader and compute are meant to share it.
//
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "common/model_config.h"
#include "common/safetensors.h"
#include "common/tensor_names.h"

namespace k3::plan {

// Ring slot size for streamed layers (docs/trunk-pieces.md §5), the plan's default and its
// TOML/flag override (trunk_piece, --trunk-piece). A working assumption: the read bench found
// no piece size within 5% of whole-layer reads on the development VM (§5); this is its one home.
inline constexpr int64_t kTrunkPieceBytes = 64ll << 20;
// Bytes the trunk reader keeps read ahead of compute when layers stream in pieces (read_ahead).
inline constexpr int64_t kTrunkReadAhead = 128ll << 20;
// trunk_piece = "layer": slots of the largest streamed layer, as before pieces.
inline constexpr int64_t kTrunkPieceLayer = 0;

// The ring slot: `trunk_piece` (kTrunkPieceLayer: the widest streamed layer), never below the
// streamed layers' MinPieceSlot `min_piece`, never above the widest streamed layer (all widened
// bytes). 0 when nothing streams. A whole-layer slot gets `coded_margin` more when layers stream
// from a coded trunk (kCodedSlotMargin: room to decode in place, common/codec/coded_fill.h).
int64_t TrunkSlotBytes(int64_t widest_streamed, int64_t min_piece, int64_t trunk_piece, int64_t coded_margin = 0);
// What a whole-layer ring slot needs beyond the layer's window to decode a coded layer in place:
// the largest frame's output (64 KiB) ahead of its input, the read's 4096 alignment at both ends,
// the runs' headers and directories. 1 MiB covers that with room; the reader checks every frame.
inline constexpr int64_t kCodedSlotMargin = 1ll << 20;
// Ring slots: `ring_slots` when set (> 0); else 2 for whole-layer slots (one computing, one
// reading), and 1 + ceil(min(read_ahead, widest_streamed) / slot) (at least 2) when layers
// stream in pieces: never more read ahead than one whole layer.
int TrunkRingSlots(int64_t slot, int64_t widest_streamed, int64_t read_ahead, int ring_slots);

// One trunk tensor of a layer in the order the forward pass uses it (services/compute:
// BindLayer, kda.cpp, mla.cpp, ffn.cpp). `splittable`: only kern::Matmul reads it, so it may
// arrive in row blocks; the others are atomic (vectors widened at bind time, the conv taps,
// and MLA's kv_b, which MatmulTransposedRows reads per head).
struct UseEntry {
  TensorRole role;
  bool splittable = false;
};

// The small atomic tensors first (compute copies them out at bind), then the mixer's
// matrices (KDA q k v b f_a f_b g, o; MLA q_a q_b kv_a g kv_b, o), then the FFN (dense
// gate up down; MoE router, latent down, shared gate up down, latent up). A permutation of
// LayerTrunkRoles(cfg, layer).
std::vector<UseEntry> LayerUseOrder(const ModelConfig& cfg, int layer);

// One tensor of a layer, in the order compute uses it.
struct PieceTensor {
  std::string name;
  int64_t offset = 0;      // file offset of its first byte
  int64_t rows = 1;        // rows (1 for a vector)
  int64_t row_bytes = 0;   // bytes of one row
  bool splittable = false; // only row-wise matrix products read it: may be cut into row blocks
  int64_t bytes() const { return rows * row_bytes; }
};

// Rows [row0, row0 + rows) of tensor `tensor` (an index into the input list).
struct PieceRun {
  int tensor = 0;
  int64_t row0 = 0;
  int64_t rows = 0;
};

struct Piece {
  std::vector<PieceRun> runs;  // consumed in this order
  bool whole_run = false;      // the layer's whole [min, max) run in one read (today's slot)
};

// The slot bytes run `r` takes: its bytes read widened to 4096 bounds, at an aligned offset.
int64_t PieceRunSlotBytes(const std::vector<PieceTensor>& tensors, const PieceRun& r);

// The smallest slot LayerPieces accepts: one widened row of every splittable tensor and every
// atomic tensor whole, widened.
int64_t MinPieceSlot(const std::vector<PieceTensor>& tensors);

// Cuts a layer into pieces for slots of `slot_bytes`. `run_bytes` is the layer's whole
// [min offset, max end) run: when its widened size fits a slot, the layer is one piece with
// whole_run (exactly today's read). Otherwise runs are packed in use order: a tensor joins the
// current piece while it fits, an atomic one that does not fit starts a new piece, and a
// splittable one fills the current piece with as many rows as fit and continues in new
// pieces. Throws k3::Error(kExitUsage) when slot_bytes < MinPieceSlot(tensors).
std::vector<Piece> LayerPieces(const std::vector<PieceTensor>& tensors, int64_t run_bytes, int64_t slot_bytes);

// Layer `layer`'s trunk tensors in LayerUseOrder, with offsets and row bytes from the shard
// headers: a splittable tensor has shape[0] rows, an atomic one is a single "row" of all its
// bytes. BadModel when a tensor is missing.
std::vector<PieceTensor> LayerPieceTensors(const Checkpoint& ck, const ModelConfig& cfg, int layer);

// The same list from the config alone (release shapes and dtypes; offsets 0): what the memory
// plan sizes slots with when it has no shard headers.
std::vector<PieceTensor> ReleasePieceTensors(const ModelConfig& cfg, int layer);

// Where one run of a piece sits in its slot. The reader reads the window [wbegin, wbegin +
// wlength) to slot + slot_offset; the run's first byte is then at slot + slot_offset + lead
// (common/read_window.h). Runs are packed at 4096-aligned offsets in piece order.
struct RunPlacement {
  int64_t begin = 0;        // file offset of the run's first byte
  int64_t length = 0;       // the run's bytes (rows x row_bytes)
  int64_t slot_offset = 0;  // where the run's window starts in the slot (4096-aligned)
  int64_t wbegin() const { return AlignDownI(begin); }
  int64_t lead() const { return begin - wbegin(); }
  static int64_t AlignDownI(int64_t v) { return v / 4096 * 4096; }
};
// The placements of a piece's runs (not for a whole_run piece, which is read as the layer's run).
std::vector<RunPlacement> PiecePlacements(const std::vector<PieceTensor>& tensors, const Piece& piece);
// Slot bytes a piece takes: the layer's widened run for a whole_run piece (`run_bytes`), else
// the sum of its runs' PieceRunSlotBytes.
int64_t PieceSlotBytes(const std::vector<PieceTensor>& tensors, const Piece& piece, int64_t run_bytes);

}  // namespace k3::plan
