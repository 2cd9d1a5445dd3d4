// What the two AVX-512 MXFP4 bodies share: E2M1 decoding with vpermw and the row/token loop.
// matmul_avx512.cpp (f32 inputs) and matmul_avx512bf16.cpp (bf16 inputs) differ only in how a
// decoded group meets x (the `Dot` type below). Included only by them, after <immintrin.h>,
// compiled with at least AVX-512 F/BW/VL; internal linkage for the reason in simd_helpers.h.
//
// Determinism: every (token, row) output uses the same two accumulators (even/odd group) and the
// same instruction sequence whatever block of rows/tokens it is computed in.
#pragma once
#include <immintrin.h>

#include <cstdint>

#include "kernels_detail.h"
#include "simd_helpers.h"

namespace k3::kern::detail {
namespace {

// E2M1 code -> its bf16 bits (every E2M1 value is exact in bf16). vpermw on ymm reads only the
// low 4 bits of each index word, so the high nibble needs a shift but no mask.
inline __m256i E2M1Bf16Table() {
  return _mm256_setr_epi16(0x0000, 0x3F00, 0x3F80, 0x3FC0, 0x4000, 0x4040, 0x4080, 0x40C0,
                           int16_t(0x8000), int16_t(0xBF00), int16_t(0xBF80), int16_t(0xBFC0),
                           int16_t(0xC000), int16_t(0xC040), int16_t(0xC080), int16_t(0xC0C0));
}

// One 32-weight group (16 bytes) -> bf16 words of the even elements (word i = element 2i) and
// of the odd elements (word i = element 2i + 1): one widening load, one shift, two vpermw.
inline void DecodeGroupBf16(const uint8_t* p, __m256i table, __m256i& even, __m256i& odd) {
  const __m256i bytes = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  even = _mm256_permutexvar_epi16(bytes, table);
  odd = _mm256_permutexvar_epi16(_mm256_srli_epi16(bytes, 4), table);
}

// Prefetch distance for the packed bytes (expert slots are filled by another process; see the
// same constant in the AVX2 body).
constexpr int64_t kAhead = 1024;

// One row against NT tokens (x rows `cols` elements apart). Dot::Group(even, odd, xs) is one
// group's sum for one token; times the group scale it goes into the even or odd accumulator by
// the group's parity. Decoding is shared by the NT tokens.
template <class Dot, int NT>
void RowTokens(const uint8_t* p, const uint8_t* s, int64_t ngroups, int64_t cols, const float* scale,
               const typename Dot::XElem* x, float* y, int64_t rows) {
  const __m256i table = E2M1Bf16Table();
  __m256 even[NT], odd[NT];
  for (int j = 0; j < NT; ++j) even[j] = odd[j] = _mm256_setzero_ps();
  // One group (packed bytes pg, x of token 0 at xg) times its scale into acc[0..NT).
  const auto group = [&](const uint8_t* pg, float sc, const typename Dot::XElem* xg, __m256* acc) {
    __m256i a, b;
    DecodeGroupBf16(pg, table, a, b);
    const __m256 sv = _mm256_set1_ps(sc);
    for (int j = 0; j < NT; ++j) acc[j] = _mm256_fmadd_ps(Dot::Group(a, b, xg + j * cols), sv, acc[j]);
  };
  int64_t g = 0;
  for (; g + 2 <= ngroups; g += 2, p += 32, x += 64) {
    if ((reinterpret_cast<uintptr_t>(p) & 32) == 0) _mm_prefetch(reinterpret_cast<const char*>(p) + kAhead, _MM_HINT_T0);
    group(p, scale[s[g]], x, even);
    group(p + 16, scale[s[g + 1]], x + 32, odd);
  }
  if (g < ngroups) group(p, scale[s[g]], x, even);
  for (int j = 0; j < NT; ++j) y[j * rows] = HSum(_mm256_add_ps(even[j], odd[j]));
}

// Y[t*rows + r] for a group-32 MXFP4 matrix; x is T rows of `cols` elements in Dot's layout.
template <class Dot>
void Mxfp4Rows(const uint8_t* packed, const uint8_t* scales, int64_t rows, int64_t cols,
               const float* scale, const typename Dot::XElem* x, int64_t T, float* y) {
  const int64_t ngroups = cols / 32;
  const int64_t nblocks = (rows + kRowBlock - 1) / kRowBlock;
  const bool parallel = rows * cols * T >= kParallelMinWork;
#pragma omp parallel for schedule(static) if (parallel)
  for (int64_t b = 0; b < nblocks; ++b) {
    const int64_t r0 = b * kRowBlock, r1 = Min(rows, r0 + kRowBlock);
    for (int64_t r = r0; r < r1; ++r) {
      const uint8_t* pr = packed + r * (cols / 2);
      const uint8_t* sr = scales + r * ngroups;
      for (int64_t t = 0; t < T; t += 4) {
        const typename Dot::XElem* xt = x + t * cols;
        float* yt = y + t * rows + r;
        switch (Min(4, T - t)) {
          case 4: RowTokens<Dot, 4>(pr, sr, ngroups, cols, scale, xt, yt, rows); break;
          case 3: RowTokens<Dot, 3>(pr, sr, ngroups, cols, scale, xt, yt, rows); break;
          case 2: RowTokens<Dot, 2>(pr, sr, ngroups, cols, scale, xt, yt, rows); break;
          default: RowTokens<Dot, 1>(pr, sr, ngroups, cols, scale, xt, yt, rows); break;
        }
      }
    }
  }
}

}  // namespace
}  // namespace k3::kern::detail
