// The scalar twin of the bf16 frame decoder: one value at a time, in the format's own terms.
#include <cstring>

#include "common/codec/frame_bodies.h"
#include "common/codec/frame_codec.h"

namespace k3::codec::detail {

uint64_t DecodeGroupsScalar(const uint8_t* groups, size_t n_groups, const uint8_t table[8], const uint8_t* esc,
                            uint64_t n_esc, uint8_t* dst) {
  uint64_t j = 0;
  for (size_t g = 0; g < n_groups; ++g) {
    const uint8_t* p = groups + g * kGroupBytes;
    uint32_t plane[3];
    std::memcpy(plane, p, sizeof plane);
    const uint8_t* low = p + 12;
    for (size_t i = 0; i < kGroupValues; ++i) {
      const unsigned idx = ((plane[0] >> i) & 1u) | ((plane[1] >> i) & 1u) << 1 | ((plane[2] >> i) & 1u) << 2;
      uint8_t hi = table[idx];
      if (idx == 7) {
        hi = j < n_esc ? esc[j] : 0;
        ++j;
      }
      dst[2 * (g * kGroupValues + i)] = low[i];
      dst[2 * (g * kGroupValues + i) + 1] = hi;
    }
  }
  return j;
}

uint64_t ExpandEscapesScalar(const uint8_t* nibbles, uint64_t n_esc, const uint8_t esc_table[16], const uint8_t* raws,
                             uint64_t n_raw, uint8_t* out) {
  uint64_t r = 0;
  for (uint64_t j = 0; j < n_esc; ++j) {
    const unsigned k = (nibbles[j / 2] >> (4 * (j % 2))) & 15u;
    if (k < 15) {
      out[j] = esc_table[k];
    } else {
      if (r == n_raw) return n_raw + 1;
      out[j] = raws[r++];
    }
  }
  return r;
}

}  // namespace k3::codec::detail
