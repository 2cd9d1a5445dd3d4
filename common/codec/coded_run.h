// A coded run (docs/formats.md, "Coded trunk"): the frames of one byte run of a shard (a layer's
// trunk, the globals) behind a directory, so any frame decodes on its own (threads split a run
// by frames) and a run decodes to exactly its source bytes.
//
//   header    32 bytes: "K3CR", u32 version 1, u64 source bytes, u32 frames, u32 0, u64 body bytes
//   directory 16 bytes per frame: u64 source offset, u64 body offset (both from 0, increasing)
//   body      the frames (frame_codec.h), back to back
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/codec/frame_codec.h"

namespace k3::codec {

inline constexpr uint32_t kRunVersion = 1;
inline constexpr size_t kRunHeaderBytes = 32;
inline constexpr size_t kRunEntryBytes = 16;

// A bf16 tensor inside a run's source bytes (offsets from the run's first byte). Bytes outside
// every span (f32 tensors, gaps) are stored in raw frames.
struct Bf16Span {
  uint64_t offset = 0;
  uint64_t bytes = 0;
};

// The frames' source pieces of a run of `n` bytes: each span cut into bf16 pieces of at most
// kFrameValues values from its start, the bytes between spans into raw pieces of at most
// kRawFrameBytes. `spans` must be sorted, disjoint, inside [0, n), of even length.
struct FramePiece {
  uint64_t offset = 0;
  uint64_t bytes = 0;
  bool bf16 = false;
};
std::vector<FramePiece> PlanFramePieces(uint64_t n, const std::vector<Bf16Span>& spans);

// Codes `n` source bytes, one frame per piece of PlanFramePieces.
std::vector<uint8_t> EncodeRun(const uint8_t* src, uint64_t n, const std::vector<Bf16Span>& spans);

struct RunFrame {
  uint64_t src_offset = 0;
  uint64_t coded_offset = 0;  // from the start of the coded run
  FrameInfo info;
};

// Checks the header, the directory and every frame header of a coded run of exactly
// `coded_bytes` bytes; Error(kExitBadModel) naming the defect. A run whose frames do not tile
// its source bytes exactly, or do not fill its body exactly, is refused.
std::vector<RunFrame> ParseRun(const uint8_t* coded, uint64_t coded_bytes, uint64_t* src_bytes);

// Decodes frames [first, last) of a parsed run into `dst` (the run's source bytes).
void DecodeFrames(const std::vector<RunFrame>& frames, size_t first, size_t last, const uint8_t* coded, uint8_t* dst,
                  Isa isa = Isa::kAuto);

// ParseRun, a check that the run decodes to `dst_bytes`, and every frame decoded into `dst`.
void DecodeRun(const uint8_t* coded, uint64_t coded_bytes, uint8_t* dst, uint64_t dst_bytes, Isa isa = Isa::kAuto);

}  // namespace k3::codec
