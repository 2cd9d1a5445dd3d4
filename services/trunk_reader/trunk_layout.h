// Where each layer's trunk run sits in the checkpoint, and how the pinned arena is packed.
// Pure functions over the shard headers (no I/O beyond what Checkpoint::Open did).
//
// Runs are indexed 0..num_layers-1 for layers and num_layers for the globals (the model-level
// tensors: embed_tokens, lm_head, norm, output_attn_res_*), a pseudo-layer at the end of the
// walk. Every run is read through its window (common/read_window.h); the first trunk byte then
// sits at `lead = begin - wbegin` inside the destination.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "common/model_config.h"
#include "common/plan/trunk_pieces.h"
#include "common/read_window.h"
#include "common/safetensors.h"
#include "common/tensor_names.h"

namespace k3::svc {

struct TrunkLayout {
  int num_layers = 0;
  // num_layers + 1 entries (the last is the globals), then one per lm_head chunk when
  // lm_head streams: chunk c is pseudo-layer num_layers + 1 + c.
  std::vector<ReadRun> runs;
  int64_t lm_chunk_rows = 0;  // rows per lm_head chunk (0: lm_head is in the globals run)
  int lm_chunks = 0;
  std::vector<uint64_t> shard_sizes;
  // Per layer: its trunk tensors in use order (common/plan/trunk_pieces.h), and once CutPieces
  // ran, its pieces for the ring's slot size (one whole_run piece when the layer fits a slot).
  std::vector<std::vector<plan::PieceTensor>> tensors;
  std::vector<std::vector<plan::Piece>> pieces;
  // The walk over pieces (CutPieces): position p carries piece walk[p].piece of run walk[p].run;
  // run r's pieces are the positions first_pos[r] ... Without CutPieces: one position per run.
  struct Position {
    int run = 0;
    int piece = 0;
  };
  std::vector<Position> walk;
  std::vector<int> first_pos;
  int globals() const { return num_layers; }
  int runs_count() const { return static_cast<int>(runs.size()); }
  int walk_length() const { return walk.empty() ? runs_count() : static_cast<int>(walk.size()); }
  int pieces_of(int run) const {
    return run < num_layers && !pieces.empty() ? static_cast<int>(pieces[static_cast<size_t>(run)].size()) : 1;
  }
  int position(int run, int piece) const { return first_pos.empty() ? run : first_pos[static_cast<size_t>(run)] + piece; }
};

// BadModel if a layer's trunk or the globals are missing or split across shards. The globals
// run is GlobalsRange(ck, set) (common/tensor_names.h).
TrunkLayout BuildTrunkLayout(const Checkpoint& ck, const ModelConfig& cfg, GlobalsSet set = {});

// Appends lm_head row chunks sized for ring slots of `slot_bytes` (common/plan/head_stream.h).
// Runtime error when not even one row fits a slot.
void AppendLmHeadChunks(TrunkLayout& layout, const Checkpoint& ck, const ModelConfig& cfg, uint64_t slot_bytes);

// Cuts every streamed layer into pieces for ring slots of `slot_bytes` (plan::LayerPieces; a
// pinned layer is one whole piece) and builds the walk over pieces. Call after
// AppendLmHeadChunks. RuntimeFailure naming the layer when a slot is below its minimum.
void CutPieces(TrunkLayout& layout, const std::vector<int>& pinned, uint64_t slot_bytes);

// "3,0,7" -> {0,3,7} (sorted, distinct). Empty text -> {}. k3::Error(kExitUsage) on anything
// that is not a list of layer indices in [0, num_layers) as common/id_list.h spells lists.
std::vector<int> ParsePinList(const std::string& text, int num_layers);

// One entry of the pinned arena: the run's widened window is copied to `arena_offset`
// (4096-aligned); the first trunk byte is at `arena_offset + lead`.
struct PinnedEntry {
  int layer = 0;  // num_layers for the globals
  uint64_t arena_offset = 0;
  uint64_t first_byte = 0;  // arena_offset + lead: what LayerReady.offset announces
  uint64_t length = 0;      // trunk bytes (not widened)
};

// Pinned layers in ascending order, then the globals, packed back to back at 4096-aligned
// offsets. `total` receives the bytes the arena must have.
std::vector<PinnedEntry> PlanPinned(const TrunkLayout& layout, const std::vector<int>& pinned, uint64_t* total);


}  // namespace k3::svc
