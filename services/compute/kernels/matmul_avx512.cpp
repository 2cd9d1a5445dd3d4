// AVX-512 bodies with f32 inputs, the defaults where the CPU has AVX-512 F/BW/VL: the MXFP4
// product, and the one-token dense product. Compiled with those flags (this file only) and
// reached only through the run-time dispatch in matmul.cpp. 256-bit vectors only (Zen 4 runs
// 512-bit ones as two halves; measured no faster in the bf16-input body).
//
// The one-token dense product is the AVX2 body's code (dense_body.h) with 12 rows in flight
// instead of 8, which AVX-512's 32 vector registers allow: same arithmetic per row, bit for bit.
// In a prototype it read ~8% more when the host's memory was in its fast phase
// (docs/benchmarks.md, "One-token dense products with 12 rows in flight").
//
// Why the MXFP4 body is faster than the AVX2 one: vpermw turns 16 codes into 16 exact bf16
// weights in one instruction, and a bf16 word becomes an f32 with one shift (low word of a dword)
// or one AND (high word). A 32-weight group costs 8 decode ops + 5 FMAs instead of 12 + 5; the products
// and the f32 sums are as exact as in the AVX2 body, only the lane order of the sums differs.
// Keep this file free of std:: templates and other inline library code (see kernels_detail.h).
#include <immintrin.h>

#include "avx512_mxfp4.h"
#include "dense_body.h"
#include "kernels_detail.h"

namespace k3::kern::detail {
namespace {

// x laid out per 32-column block as [x(4k)][x(4k+2)][x(4k+1)][x(4k+3)], k = 0..7 (laid out by
// Mxfp4F32XLayout in matmul.cpp). Lane k of a group's sum: w[4k]x[4k], then + w[4k+2]x[4k+2],
// + w[4k+1]x[4k+1], + w[4k+3]x[4k+3], one FMA rounding each.
struct F32Dot {
  using XElem = float;
  static __m256 Group(__m256i even, __m256i odd, const float* xs) {
    const __m256i high = _mm256_set1_epi32(-65536);  // 0xFFFF0000
    __m256 q = _mm256_mul_ps(_mm256_castsi256_ps(_mm256_slli_epi32(even, 16)), _mm256_loadu_ps(xs));
    q = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_and_si256(even, high)), _mm256_loadu_ps(xs + 8), q);
    q = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_slli_epi32(odd, 16)), _mm256_loadu_ps(xs + 16), q);
    return _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_and_si256(odd, high)), _mm256_loadu_ps(xs + 24), q);
  }
};

}  // namespace

void DenseAvx512T1(const void* w, bool bf16, int64_t rows, int64_t cols, const float* x,
                   float* x_split, float* y) {
  if (bf16) SplitX(x, 1, cols, x_split);
  constexpr int64_t kRows = 4 * 12;  // rows per work item: four 12-row blocks
  const int64_t nblocks = (rows + kRows - 1) / kRows;
  const bool parallel = rows * cols >= kParallelMinWork;
#pragma omp parallel for schedule(static) if (parallel)
  for (int64_t b = 0; b < nblocks; ++b) {
    const int64_t r0 = b * kRows, r1 = Min(rows, r0 + kRows);
    if (bf16) {
      DotRowsT1<Bf16W, 12>(static_cast<const uint16_t*>(w), r0, r1, cols, x_split, y);
    } else {
      DotRowsT1<F32W, 12>(static_cast<const float*>(w), r0, r1, cols, x, y);
    }
  }
}

void Mxfp4Avx512(const uint8_t* packed, const uint8_t* scales, int64_t rows, int64_t cols,
                 const float* scale, const float* x, int64_t T, float* y) {
  Mxfp4Rows<F32Dot>(packed, scales, rows, cols, scale, x, T, y);
}

}  // namespace k3::kern::detail
