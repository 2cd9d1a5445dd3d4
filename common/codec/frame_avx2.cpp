// The AVX2 body of the bf16 frame decoder: a group of 32 values per step, without a branch per
// value or per escape. Each bit plane is spread to one byte per value (broadcast, shuffle,
// test); the three give the index, and one in-lane shuffle looks the high bytes up. Escapes
// (index 7) take their bytes in order: each 16-value half loads the next 16 escape bytes and
// shuffles them into place by each value's rank among the half's escapes (a prefix count of the
// escape mask). Unpacks interleave high and low bytes.
#include <immintrin.h>

#include <cstring>

#include "common/codec/frame_bodies.h"
#include "common/codec/frame_codec.h"

namespace k3::codec::detail {

namespace {

// Byte i of the result is 0xFF when bit i of `bits` is set.
inline __m256i SpreadBits(uint32_t bits) {
  const __m256i spread = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,  //
                                          2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
  const __m256i bit = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ull));
  const __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(bits)), spread);
  return _mm256_cmpeq_epi8(_mm256_and_si256(v, bit), bit);
}

// For bytes that are 0 or 0xFF (-1): per 128-bit lane, the number of 0xFF bytes before each byte.
inline __m256i ExclusiveCount(__m256i m) {
  __m256i s = _mm256_add_epi8(m, _mm256_slli_si256(m, 1));
  s = _mm256_add_epi8(s, _mm256_slli_si256(s, 2));
  s = _mm256_add_epi8(s, _mm256_slli_si256(s, 4));
  s = _mm256_add_epi8(s, _mm256_slli_si256(s, 8));
  return _mm256_sub_epi8(m, s);  // -(inclusive) + self = exclusive, as a positive count
}

}  // namespace

uint64_t DecodeGroupsAvx2(const uint8_t* groups, size_t n_groups, const uint8_t table[8], const uint8_t* esc,
                          uint64_t n_esc, uint8_t* dst) {
  uint64_t tbl64;
  std::memcpy(&tbl64, table, 8);
  const __m256i lut = _mm256_set1_epi64x(static_cast<int64_t>(tbl64));  // indices 8..15 never occur
  const __m256i one = _mm256_set1_epi8(1), two = _mm256_set1_epi8(2), four = _mm256_set1_epi8(4);
  uint64_t j = 0;
  for (size_t g = 0; g < n_groups; ++g) {
    const uint8_t* p = groups + g * kGroupBytes;
    uint32_t plane[3];
    std::memcpy(plane, p, sizeof plane);
    const __m256i b0 = SpreadBits(plane[0]), b1 = SpreadBits(plane[1]), b2 = SpreadBits(plane[2]);
    const __m256i idx = _mm256_or_si256(_mm256_or_si256(_mm256_and_si256(b0, one), _mm256_and_si256(b1, two)),
                                        _mm256_and_si256(b2, four));
    __m256i hi = _mm256_shuffle_epi8(lut, idx);
    // Always taken (no branch to mispredict: about one group in six has no escape).
    {
      const uint32_t m = plane[0] & plane[1] & plane[2];
      const unsigned low_half = static_cast<unsigned>(__builtin_popcount(m & 0xFFFFu));
      const unsigned count = static_cast<unsigned>(__builtin_popcount(m));
      // The escape bytes are read 16 at a time from j (and j + low_half): the caller's buffer
      // holds 32 bytes of slack after n_esc; past n_esc the counts no longer match and the caller refuses the frame.
      if (j + count > n_esc) return j + count;
      const __m256i window = _mm256_loadu2_m128i(reinterpret_cast<const __m128i*>(esc + j + low_half),
                                                 reinterpret_cast<const __m128i*>(esc + j));
      const __m256i is_esc = _mm256_and_si256(_mm256_and_si256(b0, b1), b2);
      hi = _mm256_blendv_epi8(hi, _mm256_shuffle_epi8(window, ExclusiveCount(is_esc)), is_esc);
      j += count;
    }
    const __m256i lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 12));
    const __m256i a = _mm256_unpacklo_epi8(lo, hi);  // values 0..7 | 16..23
    const __m256i b = _mm256_unpackhi_epi8(lo, hi);  // values 8..15 | 24..31
    uint8_t* out = dst + g * 2 * kGroupValues;
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), _mm256_permute2x128_si256(a, b, 0x20));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 32), _mm256_permute2x128_si256(a, b, 0x31));
  }
  return j;
}

uint64_t ExpandEscapesAvx2(const uint8_t* nibbles, uint64_t n_esc, const uint8_t esc_table[16], const uint8_t* raws,
                           uint64_t n_raw, uint8_t* out) {
  const __m128i tbl = _mm_loadu_si128(reinterpret_cast<const __m128i*>(esc_table));
  const __m128i low4 = _mm_set1_epi8(0x0F), fifteen = _mm_set1_epi8(15);
  uint64_t r = 0, j = 0;
  // 32 escapes (16 nibble bytes) per step; nibble 15 (a raw byte, rare) is patched after.
  for (; j + 32 <= n_esc; j += 32) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(nibbles + j / 2));
    const __m128i lo = _mm_and_si128(v, low4), hi = _mm_and_si128(_mm_srli_epi16(v, 4), low4);
    const __m128i k0 = _mm_unpacklo_epi8(lo, hi), k1 = _mm_unpackhi_epi8(lo, hi);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + j), _mm_shuffle_epi8(tbl, k0));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + j + 16), _mm_shuffle_epi8(tbl, k1));
    uint32_t raw = static_cast<uint32_t>(_mm_movemask_epi8(_mm_cmpeq_epi8(k0, fifteen))) |
                   static_cast<uint32_t>(_mm_movemask_epi8(_mm_cmpeq_epi8(k1, fifteen))) << 16;
    for (; raw != 0; raw &= raw - 1) {
      if (r == n_raw) return n_raw + 1;
      out[j + static_cast<unsigned>(__builtin_ctz(raw))] = raws[r++];
    }
  }
  const uint64_t rest = ExpandEscapesScalar(nibbles + j / 2, n_esc - j, esc_table, raws + r, n_raw - r, out + j);
  return rest > n_raw - r ? n_raw + 1 : r + rest;
}

}  // namespace k3::codec::detail
