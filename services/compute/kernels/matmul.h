// Weight-times-activation kernels for the three weight formats of a K3 checkpoint:
// F32 and BF16 (trunk tensors) and MXFP4 (routed experts, read as packed nibbles + E8M0
// scales, never materialised). Layout is the checkpoint's: W[rows=out][cols=in], y = W x.
//
// Determinism contract (tests check it): every output element y[t][r] is one dot product
// computed by one thread in a fixed order that depends only on `cols` and the selected ISA,
// never on T, on the row range, or on the thread count. So a prompt processed in chunks, or
// token by token, or with 1 or N threads, gives bit-identical results.
//
// Every entry point has a scalar twin (`_scalar`) and an AVX2+FMA body (`_avx2`); the plain
// name dispatches once at start-up (AVX2 when the CPU has it, unless K3_FORCE_SCALAR=1). Both
// products also have an AVX-512 body (`_avx512`), chosen where the CPU has AVX-512 F/BW/VL
// unless K3_NO_AVX512=1 (or K3_FORCE_SCALAR=1): the dense one runs the AVX2 arithmetic bit for
// bit with more rows in flight; the MXFP4 one (group 32; other groups take the AVX2 body)
// decodes faster and sums in another lane order.
#pragma once
#include <cstdint>

namespace k3::kern {

enum class WFormat { F32, BF16 };

// A dense row-major matrix view (non-owning). `data` points at rows*cols elements.
struct DenseMat {
  const void* data = nullptr;
  WFormat format = WFormat::F32;
  int64_t rows = 0;
  int64_t cols = 0;
};

// An MXFP4 matrix view: packed[rows][cols/2] (element 2j in the low nibble of byte j),
// scales[rows][cols/group] E8M0 bytes (2^(s-127)). cols % group == 0, group % 2 == 0.
struct Mxfp4Mat {
  const uint8_t* packed = nullptr;
  const uint8_t* scales = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t group = 32;
};

// Y[t*ldy + r] = sum_c W[r][c] * X[t*ldx + c]   for t < T, r < W.rows.
// X rows are W.cols floats; OpenMP parallel over rows (and tokens), deterministic.
void Matmul(const DenseMat& W, const float* X, int64_t T, float* Y);
void MatmulScalar(const DenseMat& W, const float* X, int64_t T, float* Y);
void MatmulAvx2(const DenseMat& W, const float* X, int64_t T, float* Y);
void MatmulAvx512(const DenseMat& W, const float* X, int64_t T, float* Y);  // = MatmulAvx2's bits

void MatmulMxfp4(const Mxfp4Mat& W, const float* X, int64_t T, float* Y);
void MatmulMxfp4Scalar(const Mxfp4Mat& W, const float* X, int64_t T, float* Y);
void MatmulMxfp4Avx2(const Mxfp4Mat& W, const float* X, int64_t T, float* Y);
// vpermw decoding, ~13 vector ops per 32 weights instead of ~17; group 32 only. Same exactness
// as the AVX2 body (exact products, f32 sums); the lane order of the sums differs, so the last
// bits can too.
void MatmulMxfp4Avx512(const Mxfp4Mat& W, const float* X, int64_t T, float* Y);

// The MXFP4 product with X rounded to bf16 first (round to nearest even), which is how the
// official reference feeds the routed experts (bf16 activations, docs/model.md "Numerics"). Products
// stay exact (bf16 input times E2M1 times a power of two), sums are f32; only the inputs lose
// bits. Where the CPU has AVX512-BF16 (and the group is 32) the body needs ~7 vector ops per 32
// weights instead of ~13-17; elsewhere X is rounded and the dispatched f32 body runs. Same determinism
// contract as the others, per selected body. K3_NO_AVX512=1 skips the AVX512 body.
void MatmulMxfp4Bf16In(const Mxfp4Mat& W, const float* X, int64_t T, float* Y);
void MatmulMxfp4Bf16InAvx512(const Mxfp4Mat& W, const float* X, int64_t T, float* Y);  // group 32

// Transposed product over a block of rows: y[c] = sum_{i<n} x[i] * W[row0+i][c] for c < W.cols.
// Used by MLA's absorbed attention (q -> latent, latent -> v). Fixed order over i.
void MatmulTransposedRows(const DenseMat& W, int64_t row0, int64_t n, const float* x, float* y);

// Converts one row of W to float (embedding lookup).
void RowToFloat(const DenseMat& W, int64_t row, float* out);

// Decodes one MXFP4 row to float (tests and reference comparisons).
void Mxfp4RowToFloat(const Mxfp4Mat& W, int64_t row, float* out);

// E2M1 code -> value, and E8M0 byte -> 2^(s-127) (s = 255 is NaN per spec; we return NaN so a
// corrupt scale poisons the output visibly instead of silently zeroing a group).
float E2M1Value(uint8_t nibble);
float E8M0Scale(uint8_t s);

bool CpuHasAvx2Fma();
bool CpuHasAvx512();      // AVX-512 F, BW and VL
bool CpuHasAvx512Bf16();  // AVX-512 F, BW, VL and BF16
const char* ActiveIsa();  // "avx512", "avx2" or "scalar" (Matmul, and MatmulMxfp4 at group 32)
const char* ActiveMxfp4Bf16InIsa();  // "avx512bf16", or ActiveIsa()

// bf16 <-> f32 (bf16 is the top half of an f32; rounding to nearest even on the way down).
inline float Bf16ToF32(uint16_t b) {
  uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  __builtin_memcpy(&f, &u, 4);
  return f;
}
uint16_t F32ToBf16(float f);

}  // namespace k3::kern
