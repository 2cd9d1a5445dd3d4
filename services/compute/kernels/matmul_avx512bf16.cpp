// AVX512-BF16 body of the MXFP4 product with bf16 inputs (MatmulMxfp4Bf16In). Compiled with
// AVX-512 F/BW/VL/BF16 (this file only) and reached only through the run-time dispatch in
// matmul.cpp. It uses 256-bit vectors only: the EVEX forms of vpermw and vdpbf16ps on ymm.
//
// Why it is faster than the f32 body: with x in bf16, a weight never needs to become an f32.
// One vpermw turns 16 codes into 16 exact bf16 weights and one vdpbf16ps multiplies them with
// 16 inputs (products of two bf16 are exact in f32), so a 32-weight group costs ~7 vector ops
// instead of ~17.
//
// Determinism: every (token, row) output uses the same two accumulators (even/odd group) and the
// same instruction sequence whatever block of rows/tokens it is computed in.
// Keep this file free of std:: templates and other inline library code (see kernels_detail.h).
#include <immintrin.h>

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

// One 32-weight group (16 bytes) -> even elements (word i = element 2i) and odd elements.
inline void DecodeGroup(const uint8_t* p, __m256i table, __m256bh& even, __m256bh& odd) {
  const __m256i bytes = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  even = reinterpret_cast<__m256bh>(_mm256_permutexvar_epi16(bytes, table));
  odd = reinterpret_cast<__m256bh>(_mm256_permutexvar_epi16(_mm256_srli_epi16(bytes, 4), table));
}

// Sum of one group against x laid out as [x_even 16][x_odd 16] (Mxfp4Bf16XLayout): lane k gets
// w[4k]x[4k] + w[4k+2]x[4k+2] + w[4k+1]x[4k+1] + w[4k+3]x[4k+3], one rounding per product.
inline __m256 GroupDot(__m256bh even, __m256bh odd, const uint16_t* xs) {
  const __m256 p = _mm256_dpbf16_ps(_mm256_setzero_ps(), even,
                                    reinterpret_cast<__m256bh>(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(xs))));
  return _mm256_dpbf16_ps(p, odd, reinterpret_cast<__m256bh>(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(xs + 16))));
}

// Prefetch distance for the packed bytes (expert slots are filled by another process; see the
// same constant in the AVX2 body).
constexpr int64_t kAhead = 1024;

// One row against NT tokens (x rows `cols` words apart). Group g's sum times its scale goes into
// the even or odd accumulator by g's parity; decoding is shared by the NT tokens.
template <int NT>
void RowTokens(const uint8_t* p, const uint8_t* s, int64_t ngroups, int64_t cols, const float* scale,
               const uint16_t* x, float* y, int64_t rows) {
  const __m256i table = E2M1Bf16Table();
  __m256 even[NT], odd[NT];
  for (int j = 0; j < NT; ++j) even[j] = odd[j] = _mm256_setzero_ps();
  // One group (packed bytes pg, x of token 0 at xg) times its scale into acc[0..NT).
  const auto group = [&](const uint8_t* pg, float sc, const uint16_t* xg, __m256* acc) {
    __m256bh a, b;
    DecodeGroup(pg, table, a, b);
    const __m256 sv = _mm256_set1_ps(sc);
    for (int j = 0; j < NT; ++j) acc[j] = _mm256_fmadd_ps(GroupDot(a, b, xg + j * cols), sv, acc[j]);
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

}  // namespace

void Mxfp4Bf16InAvx512(const uint8_t* packed, const uint8_t* scales, int64_t rows, int64_t cols,
                       const float* scale, const uint16_t* xb, int64_t T, float* y) {
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
        const uint16_t* xt = xb + t * cols;
        float* yt = y + t * rows + r;
        switch (Min(4, T - t)) {
          case 4: RowTokens<4>(pr, sr, ngroups, cols, scale, xt, yt, rows); break;
          case 3: RowTokens<3>(pr, sr, ngroups, cols, scale, xt, yt, rows); break;
          case 2: RowTokens<2>(pr, sr, ngroups, cols, scale, xt, yt, rows); break;
          default: RowTokens<1>(pr, sr, ngroups, cols, scale, xt, yt, rows); break;
        }
      }
    }
  }
}

}  // namespace k3::kern::detail
