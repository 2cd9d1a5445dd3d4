// Sizes of the streamed model-level tensors (docs/pipeline.md "Streamed embedding and
// lm_head"). The plan, the launcher, the trunk reader and compute all derive chunk and row
// geometry from these functions, so nobody needs a second copy of the rule.
#pragma once
#include <algorithm>
#include <cstdint>

#include "common/read_window.h"

namespace k3::plan {

// lm_head rows per ring chunk: the largest row count whose widened run fits one ring slot
// (0 when not even one row fits), capped at the vocabulary.
inline int64_t LmHeadChunkRows(int64_t slot_bytes, int64_t row_bytes, int64_t vocab) {
  if (row_bytes <= 0 || vocab <= 0) return 0;
  const int64_t room = AlignDown(slot_bytes) - static_cast<int64_t>(kReadAlign);
  return room <= 0 ? 0 : std::min(vocab, room / row_bytes);
}
inline int64_t LmHeadChunks(int64_t rows_per_chunk, int64_t vocab) {
  return rows_per_chunk > 0 ? (vocab + rows_per_chunk - 1) / rows_per_chunk : 0;
}

// One embedding row in the embed-window arena: its widened read, 4096-aligned.
inline int64_t EmbedRowStride(int64_t row_bytes) { return WidenedBytes(row_bytes); }

}  // namespace k3::plan
