// Small helpers shared by the intrinsic bodies (matmul_avx2.cpp, matmul_avx512*.cpp) and
// included only by them, after <immintrin.h>. Everything here has internal linkage (anonymous
// namespace), so each body keeps its own copy compiled with its own ISA flags; an inline
// function with external linkage could be folded into one copy by the linker and run AVX-512
// code on a CPU that only has AVX2 (see kernels_detail.h).
#pragma once
#include <immintrin.h>

#include <cstdint>

namespace k3::kern::detail {
namespace {

inline int64_t Min(int64_t a, int64_t b) { return a < b ? a : b; }

// Fixed reduction tree for the 8 lanes of one accumulator.
inline float HSum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

}  // namespace
}  // namespace k3::kern::detail
