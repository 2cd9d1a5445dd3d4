// The coded trunk's frame (docs/formats.md, "Coded trunk"): a lossless code for the bytes of one
// bf16 tensor (or a raw copy of anything else), decoded with byte shuffles.
//
// A bf16 value's low byte (the last exponent bit and the mantissa) is close to noise, its high
// byte (sign and seven exponent bits) takes a handful of values. A bf16 frame keeps the low bytes
// as they are and codes each high byte as a 3-bit index into a table of the frame's seven most
// common high bytes, stored as three bit planes; index 7 is an escape, whose byte is a 4-bit
// index into the next fifteen (nibble 15: the byte itself, in a last list). Groups of 32 values
// are 44 bytes (planes, then low bytes), so one AVX2 register decodes a group.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace k3::codec {

inline constexpr uint32_t kFrameValues = 32768;    // bf16 values per frame, at most
inline constexpr uint32_t kRawFrameBytes = 65536;  // bytes per raw frame, at most
inline constexpr size_t kGroupValues = 32;
inline constexpr size_t kGroupBytes = 44;  // three 32-bit planes, then 32 low bytes
inline constexpr size_t kRawHeaderBytes = 8;
inline constexpr size_t kBf16HeaderBytes = 40;
inline constexpr int kTableSize = 7;       // indices 0..6; 7 is the escape
inline constexpr int kEscTableSize = 15;   // nibbles 0..14; 15 is a raw byte

enum class FrameKind : uint8_t { kRaw = 0, kBf16 = 1 };

// What a frame header says, checked against the bytes available (ParseFrame).
struct FrameInfo {
  FrameKind kind = FrameKind::kRaw;
  uint32_t count = 0;          // raw: bytes; bf16: values
  uint64_t decoded_bytes = 0;  // raw: count; bf16: 2 * count
  uint64_t coded_bytes = 0;    // header and body
  uint8_t table[8] = {};       // bf16: high bytes of indices 0..6 ([7] is 0)
  uint8_t esc_table[16] = {};  // bf16: high bytes of escape nibbles 0..14 ([15] is 0)
  uint32_t escapes = 0;        // bf16: values with index 7
  uint32_t raw_escapes = 0;    // bf16: escapes with nibble 15
};

// Appends the frame coding `bytes` (a bf16 tensor's bytes when `bf16`, else anything) to `out`.
// A bf16 frame holds at most kFrameValues values, a raw one kRawFrameBytes bytes; a bf16 input
// whose code would not be smaller than its raw copy is written raw. Deterministic: the same
// bytes give the same frame.
void EncodeFrame(const uint8_t* bytes, size_t n_bytes, bool bf16, std::vector<uint8_t>& out);

// Reads the header at `p` (`avail` bytes from p on). Error(kExitBadModel) naming what is wrong
// when the header is malformed or its frame does not fit in `avail`.
FrameInfo ParseFrame(const uint8_t* p, size_t avail);

// The decoder bodies. kAuto: AVX2 when the CPU has it and K3_FORCE_SCALAR is not 1.
enum class Isa { kAuto, kScalar, kAvx2 };
Isa ResolveIsa(Isa isa);  // kAuto -> the body that runs; kAvx2 on a CPU without it -> Error
const char* IsaName(Isa isa);

// Decodes the frame at `p` (checked by ParseFrame into `f`) into `dst` (f.decoded_bytes).
// Error(kExitBadModel) when the body contradicts the header (escape counts, padding).
void DecodeFrame(const FrameInfo& f, const uint8_t* p, uint8_t* dst, Isa isa = Isa::kAuto);

}  // namespace k3::codec
