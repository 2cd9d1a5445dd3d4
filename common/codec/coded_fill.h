// Streaming a layer from the coded trunk into a ring slot (docs/pipeline.md, "Coded trunk"): the
// layer's coded runs are read with O_DIRECT into the tail of the slot that will hold its bf16
// bytes, then decoded forward in place. A frame's output must end before its own coded bytes
// begin, so no frame overwrites coded bytes not yet decoded; the slot then needs only a little
// more than the layer's window (kCodedSlotMargin), not a second buffer for the coded bytes.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/codec/coded_trunk.h"

namespace k3::codec {

// The coded trunk in `dir` for this checkpoint, checked before use: its manifest loads, fits the
// checkpoint (CheckCodedTrunkFits), and its data file's header and size are this pack's.
// BadModel (exit 3) naming the file otherwise. The run digests are checked as runs are read.
CodedTrunk OpenCodedTrunk(const std::string& dir, const Checkpoint& ck, const ModelConfig& cfg);

// Each layer's coded runs: runs [first, last) of CodedTrunk::runs (file order, consecutive).
struct LayerRuns {
  size_t first = 0, last = 0;
  uint64_t source_bytes = 0;  // the layer's trunk bytes
  uint64_t coded_bytes = 0;   // the coded runs, without padding
};
// num_layers + 1 entries (the last is the globals run).
std::vector<LayerRuns> RunsByLayer(const CodedTrunk& t);

// One read of the data file: runs [first, last) from the 4096-aligned offset of the first to the
// 4096-aligned end of the last (the padding between runs rides along), and where it lands in a
// slot of `slot_bytes`: as far back as it fits, 4096-aligned. nullopt when the read is larger
// than the slot.
struct CodedRead {
  uint64_t file_offset = 0;
  uint64_t bytes = 0;
  uint64_t slot_offset = 0;
};
std::optional<CodedRead> PlanCodedRead(const CodedTrunk& t, const LayerRuns& l, uint64_t slot_bytes);
// The bytes PlanCodedRead reads for the layer (what a streamed coded layer costs per token).
uint64_t CodedReadBytes(const CodedTrunk& t, const LayerRuns& l);

// A layer's runs, parsed from the read's bytes in the slot.
struct ParsedRun {
  uint64_t out_offset = 0;  // where in the slot the run's source bytes go
  uint64_t in_offset = 0;   // where in the slot its coded bytes are
  std::vector<RunFrame> frames;
};

// Parses (ParseRun) each run of the layer from the slot; BadModel naming the run when one is
// malformed or does not decode to its source size. `out_offset` is where the layer's first trunk
// byte goes. When `check_digest`, each run's coded bytes are checked against the manifest first
// (a changed byte anywhere is refused, naming the run).
std::vector<ParsedRun> ParseLayerRuns(const CodedTrunk& t, const LayerRuns& l, const CodedRead& rd, const uint8_t* slot,
                                      uint64_t out_offset, bool check_digest);

// True when every frame's output ends at or before its own coded bytes begin (decoding in order
// then never overwrites coded bytes still to be read).
bool InPlaceFits(const std::vector<ParsedRun>& runs);

// Decodes the parsed runs in order, in place. Requires InPlaceFits.
void DecodeInPlace(const std::vector<ParsedRun>& runs, uint8_t* slot, Isa isa = Isa::kAuto);

}  // namespace k3::codec
