// The read-window rule, in one place: every byte run of a shard (a layer's trunk, the globals,
// an lm_head chunk, an embedding row, an expert) is read through the 4096-aligned window that
// covers it, so that an O_DIRECT read lands in place. The window starts at the run's start
// rounded down and ends at its end rounded up, clamped to the file's size (the last block of a
// file is short); the run's first byte then sits `lead = begin - wbegin` into the destination.
// The memory plan, the trunk reader, the expert fetcher and server, compute and the I/O
// backends all size and read through these functions.
#pragma once
#include <algorithm>
#include <concepts>
#include <cstdint>

#include "common/tensor_names.h"

namespace k3 {

// O_DIRECT's alignment of file offset, length and memory (the block size k3 assumes).
inline constexpr uint64_t kReadAlign = 4096;

template <std::integral T>
constexpr T AlignDown(T v) {
  return v / static_cast<T>(kReadAlign) * static_cast<T>(kReadAlign);
}
template <std::integral T>
constexpr T AlignUp(T v) {
  return (v + static_cast<T>(kReadAlign) - 1) / static_cast<T>(kReadAlign) * static_cast<T>(kReadAlign);
}

// The most a run of `n` bytes starting anywhere needs once widened: room for a slot or an
// arena entry before the run's offset is known.
constexpr int64_t WidenedBytes(int64_t n) { return AlignUp(n) + static_cast<int64_t>(kReadAlign); }

// A byte run of one shard and the window it is read through.
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

// `r` widened to its read window in a shard of `file_size` bytes.
inline ReadRun Widen(const ByteRange& r, uint64_t file_size) {
  ReadRun t;
  t.shard = r.shard;
  t.begin = static_cast<uint64_t>(r.begin);
  t.end = static_cast<uint64_t>(r.end);
  t.wbegin = AlignDown(t.begin);
  t.wend = std::min(AlignUp(t.end), std::max(file_size, t.end));
  return t;
}

}  // namespace k3
