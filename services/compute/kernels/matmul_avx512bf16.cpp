// AVX512-BF16 body of the MXFP4 product with bf16 inputs (MatmulMxfp4Bf16In). Compiled with
// AVX-512 F/BW/VL/BF16 (this file only) and reached only through the run-time dispatch in
// matmul.cpp. It uses 256-bit vectors only: the EVEX forms of vpermw and vdpbf16ps on ymm.
//
// Why it is faster than the f32 bodies: with x in bf16, a weight never needs to become an f32.
// One vpermw turns 16 codes into 16 exact bf16 weights and one vdpbf16ps multiplies them with
// 16 inputs (products of two bf16 are exact in f32), so a 32-weight group costs ~7 vector ops
// instead of ~17 (AVX2) or ~13 (AVX-512, f32 inputs).
// Keep this file free of std:: templates and other inline library code (see kernels_detail.h).
#include <immintrin.h>

#include "avx512_mxfp4.h"
#include "kernels_detail.h"

namespace k3::kern::detail {
namespace {

// x laid out per 32-column block as [x_even 16][x_odd 16] in bf16 (Mxfp4Bf16XLayout in matmul.cpp).
// Lane k of a group's sum gets w[4k]x[4k] + w[4k+2]x[4k+2] + w[4k+1]x[4k+1] + w[4k+3]x[4k+3],
// one rounding per product pair.
struct Bf16Dot {
  using XElem = uint16_t;
  static __m256 Group(__m256i even, __m256i odd, const uint16_t* xs) {
    const __m256 p = _mm256_dpbf16_ps(_mm256_setzero_ps(), reinterpret_cast<__m256bh>(even),
                                      reinterpret_cast<__m256bh>(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(xs))));
    return _mm256_dpbf16_ps(p, reinterpret_cast<__m256bh>(odd),
                            reinterpret_cast<__m256bh>(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(xs + 16))));
  }
};

}  // namespace

void Mxfp4Bf16InAvx512(const uint8_t* packed, const uint8_t* scales, int64_t rows, int64_t cols,
                       const float* scale, const uint16_t* xb, int64_t T, float* y) {
  Mxfp4Rows<Bf16Dot>(packed, scales, rows, cols, scale, xb, T, y);
}

}  // namespace k3::kern::detail
