// Rows one matrix product (and one routed expert's product) takes at a time in compute: a
// chunk of T prompt tokens is multiplied in tiles of at most kRowTile rows, so the kernels'
// per-call buffers (the split x of a bf16 product, a piece's block output, an expert's rows)
// stay bounded whatever the chunk. Rows are independent outputs, so tiles never change a bit.
// The memory plan counts these buffers at this size (common/plan/compute_state.cpp).
#pragma once
#include <cstdint>

namespace k3 {

inline constexpr int64_t kRowTile = 256;

}  // namespace k3
