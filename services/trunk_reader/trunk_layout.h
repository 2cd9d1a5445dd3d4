// Where each layer's trunk run sits in the checkpoint, and how the pinned arena is packed.
// Pure functions over the shard headers (no I/O beyond what Checkpoint::Open did).
//
// Runs are indexed 0..num_layers-1 for layers and num_layers for the globals (the model-level
// tensors: embed_tokens, lm_head, norm, output_attn_res_*), a pseudo-layer at the end of the
// walk. A run is read widened to 4096 bounds (start rounded down, end rounded up but clamped to
// the shard's size) so O_DIRECT can read it in place; the first trunk byte then sits at
// `lead = begin - wbegin` inside the destination.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "common/model_config.h"
#include "common/safetensors.h"
#include "common/tensor_names.h"

namespace k3::svc {

inline constexpr uint64_t kAlign = 4096;
inline uint64_t AlignDown(uint64_t v) { return v / kAlign * kAlign; }
inline uint64_t AlignUp(uint64_t v) { return (v + kAlign - 1) / kAlign * kAlign; }

// A byte run of one shard (a layer's trunk, the globals, an lm_head chunk, an expert) and the
// window it is read through.
struct ReadRun {
  int shard = 0;
  uint64_t begin = 0;   // first byte of the run in the shard
  uint64_t end = 0;     // one past the last
  uint64_t wbegin = 0;  // widened read window
  uint64_t wend = 0;
  uint64_t length() const { return end - begin; }
  uint64_t wlength() const { return wend - wbegin; }
  uint64_t lead() const { return begin - wbegin; }
};

// `r` widened to 4096 bounds for O_DIRECT, the end clamped to the shard's size.
ReadRun Widen(const ByteRange& r, uint64_t file_size);

struct TrunkLayout {
  int num_layers = 0;
  // num_layers + 1 entries (the last is the globals), then one per lm_head chunk when
  // lm_head streams: chunk c is pseudo-layer num_layers + 1 + c.
  std::vector<ReadRun> runs;
  int64_t lm_chunk_rows = 0;  // rows per lm_head chunk (0: lm_head is in the globals run)
  int lm_chunks = 0;
  int globals() const { return num_layers; }
  int walk_length() const { return num_layers + 1 + lm_chunks; }  // positions of the walk
};

// Which model-level tensors the globals run holds (the rest is streamed).
struct GlobalsSet {
  bool embed = true;
  bool lm_head = true;
};

// BadModel if a layer's trunk or the globals are missing or split across shards. The globals
// run is [min, max) of the model-level tensors in `set` (norm and output_attn_res_* always).
TrunkLayout BuildTrunkLayout(const Checkpoint& ck, const ModelConfig& cfg, GlobalsSet set = {});

// Appends lm_head row chunks sized for ring slots of `slot_bytes` (common/plan/head_stream.h).
// Runtime error when not even one row fits a slot.
void AppendLmHeadChunks(TrunkLayout& layout, const Checkpoint& ck, const ModelConfig& cfg, uint64_t slot_bytes);

// "3,0,7" -> {0,3,7} (sorted, distinct). Empty text -> {}. k3::Error(kExitUsage) on anything
// that is not a comma-separated list of layer indices in [0, num_layers).
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

// Largest widened run among the streamed (not pinned, not globals) layers: the ring slot size.
uint64_t MaxStreamedRun(const TrunkLayout& layout, const std::vector<int>& pinned);

}  // namespace k3::svc
