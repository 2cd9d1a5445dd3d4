// Internal entry points of the kernel library. Callers (matmul.cpp) validate shapes and pick the
// ISA; these bodies trust their arguments. The AVX2 translation unit includes only this header
// and <immintrin.h>, so no inline library code gets compiled there with AVX2 enabled and then
// shared (via the linker's COMDAT folding) with code that must run on CPUs without AVX2.
#pragma once
#include <cstdint>

namespace k3::kern::detail {

// Rows handed to one OpenMP work item. Any value gives the same numbers (each output is one
// dot product); 16 keeps the per-thread slices coarse while still balancing small matrices.
constexpr int64_t kRowBlock = 16;

// Work (multiply-adds) below which a call stays single-threaded: a parallel region costs
// microseconds, more than a tiny matrix takes. Does not change any result.
constexpr int64_t kParallelMinWork = int64_t{1} << 16;

// Y[t*rows + r] = sum_c W[r][c] X[t*cols + c]. `w` is f32 or (bf16 == true) raw bf16 bits.
void DenseScalar(const void* w, bool bf16, int64_t rows, int64_t cols, const float* x, int64_t T,
                 float* y);
// The AVX2 bf16 body needs scratch `x_split` of T * Bf16XStride(cols) floats (x de-interleaved
// per 16-column block, tail zero-padded); the f32 body ignores it (may be nullptr).
void DenseAvx2(const void* w, bool bf16, int64_t rows, int64_t cols, const float* x, int64_t T,
               float* x_split, float* y);
inline int64_t Bf16XStride(int64_t cols) { return (cols + 15) / 16 * 16; }
// The AVX-512 (VL) one-token dense body: DenseAvx2's arithmetic, bit for bit, with 12 rows in
// flight. Same scratch as DenseAvx2 with T = 1.
void DenseAvx512T1(const void* w, bool bf16, int64_t rows, int64_t cols, const float* x,
                   float* x_split, float* y);

// `scale` maps an E8M0 byte to 2^(s-127) (NaN for 255). The AVX2 body needs group % 32 == 0
// and scratch space `x_perm` of T*cols floats (it reorders x to its decode lane order).
void Mxfp4Scalar(const uint8_t* packed, const uint8_t* scales, int64_t rows, int64_t cols,
                 int64_t group, const float* scale, const float* x, int64_t T, float* y);
void Mxfp4Avx2(const uint8_t* packed, const uint8_t* scales, int64_t rows, int64_t cols,
               int64_t group, const float* scale, const float* x, int64_t T, float* x_perm,
               float* y);

// The AVX-512 (F/BW/VL) f32-input MXFP4 body, group 32 only. `x` holds T*cols floats: per
// token and 32-column block, x[4k] for k < 8, then x[4k+2], x[4k+1], x[4k+3].
void Mxfp4Avx512(const uint8_t* packed, const uint8_t* scales, int64_t rows, int64_t cols,
                 const float* scale, const float* x, int64_t T, float* y);

// MXFP4 with bf16 inputs (group 32 only), AVX512-BF16 body. `xb` holds T*cols bf16 words: per
// token and 32-column block, bf16(x[2i]) for i < 16 then bf16(x[2i+1]) (Mxfp4Bf16XLayout in matmul.cpp).
void Mxfp4Bf16InAvx512(const uint8_t* packed, const uint8_t* scales, int64_t rows, int64_t cols,
                       const float* scale, const uint16_t* xb, int64_t T, float* y);

}  // namespace k3::kern::detail
