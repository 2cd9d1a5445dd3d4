// Public entry points of matmul.h: argument checks, the one-time ISA choice, the x layouts of the
// AVX-512 bodies, and the small helpers (format conversions, row decode, transposed product) that
// are not hot enough to need an AVX2 body.
#include "matmul.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/row_tile.h"
#include "kernels_detail.h"

namespace k3::kern {
namespace {

constexpr float kE2M1[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                             -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

// E8M0 byte -> 2^(s-127), built once with ldexpf so s = 0 gets the exact subnormal 2^-127
// (a bit trick on the exponent field would give 0).
struct ScaleTables {
  float scale[256];
  ScaleTables() {
    for (int s = 0; s < 256; ++s) scale[s] = E8M0Scale(static_cast<uint8_t>(s));
  }
};
const ScaleTables& Tables() {
  static const ScaleTables tables;
  return tables;
}

bool UseAvx2() {
  static const bool use = [] {
    const char* force = std::getenv("K3_FORCE_SCALAR");
    const bool forced = force != nullptr && std::strcmp(force, "1") == 0;
    return !forced && CpuHasAvx2Fma();
  }();
  return use;
}

bool UseAvx512() {
  static const bool use = [] {
    const char* no = std::getenv("K3_NO_AVX512");
    return UseAvx2() && !(no != nullptr && std::strcmp(no, "1") == 0) && CpuHasAvx512();
  }();
  return use;
}

bool UseAvx512Bf16() { return UseAvx512() && CpuHasAvx512Bf16(); }

void CheckAvx2() {
  if (!CpuHasAvx2Fma()) throw RuntimeFailure("matmul: AVX2 kernel called on a CPU without AVX2+FMA");
}

std::string Shape(int64_t rows, int64_t cols) {
  return "[" + std::to_string(rows) + ", " + std::to_string(cols) + "]";
}

void CheckDense(const DenseMat& W) {
  if (W.rows < 0 || W.cols < 0) throw BadModel("matmul: negative matrix shape " + Shape(W.rows, W.cols));
  if (W.format != WFormat::F32 && W.format != WFormat::BF16) {
    throw BadModel("matmul: unknown weight format");
  }
  if (W.data == nullptr && W.rows > 0 && W.cols > 0) throw BadModel("matmul: null weight data");
}

void CheckMxfp4(const Mxfp4Mat& W) {
  if (W.rows < 0 || W.cols < 0) {
    throw BadModel("mxfp4: negative matrix shape " + Shape(W.rows, W.cols));
  }
  if (W.group <= 0 || W.group % 2 != 0) {
    throw BadModel("mxfp4: group size " + std::to_string(W.group) + " is not a positive even number");
  }
  if (W.cols % W.group != 0) {
    throw BadModel("mxfp4: " + std::to_string(W.cols) + " columns are not a multiple of group " +
                   std::to_string(W.group));
  }
  if ((W.packed == nullptr || W.scales == nullptr) && W.rows > 0 && W.cols > 0) {
    throw BadModel("mxfp4: null packed or scale data");
  }
}

// Returns false when there is nothing to compute (writes zeros when cols == 0).
bool CheckActivations(int64_t rows, int64_t cols, const float* X, int64_t T, float* Y) {
  if (T < 0) throw RuntimeFailure("matmul: negative token count " + std::to_string(T));
  if (T == 0 || rows == 0) return false;
  if (Y == nullptr || (X == nullptr && cols > 0)) throw RuntimeFailure("matmul: null X or Y");
  if (cols == 0) {
    for (int64_t i = 0; i < T * rows; ++i) Y[i] = 0.0f;
    return false;
  }
  return true;
}

// Checks for the two AVX-512 MXFP4 bodies (group 32 only). Returns false when there is nothing
// to do.
bool CheckAvx512Body(const Mxfp4Mat& W, const float* X, int64_t T, float* Y, bool cpu_has,
                     const char* body) {
  CheckMxfp4(W);
  if (!cpu_has) throw RuntimeFailure(std::string("matmul: ") + body + " kernel called on a CPU without it");
  if (W.group != 32) {
    throw BadModel(std::string("mxfp4: the ") + body + " body needs group 32, not " + std::to_string(W.group));
  }
  return CheckActivations(W.rows, W.cols, X, T, Y);
}

// x in the AVX-512 f32 body's lane order: per 32-column block x[4k] for k < 8, then x[4k+2],
// x[4k+1], x[4k+3].
void Mxfp4F32XLayout(const float* x, int64_t n, float* out) {
  for (int64_t b = 0; b < n; b += 32) {
    for (int64_t k = 0; k < 8; ++k) {
      out[b + k] = x[b + 4 * k];
      out[b + 8 + k] = x[b + 4 * k + 2];
      out[b + 16 + k] = x[b + 4 * k + 1];
      out[b + 24 + k] = x[b + 4 * k + 3];
    }
  }
}

// x rounded to bf16 in the AVX512-BF16 body's order: per 32-column block the even elements,
// then the odd ones.
void Mxfp4Bf16XLayout(const float* x, int64_t n, uint16_t* out) {
  for (int64_t b = 0; b < n; b += 32) {
    for (int64_t i = 0; i < 16; ++i) {
      out[b + i] = F32ToBf16(x[b + 2 * i]);
      out[b + 16 + i] = F32ToBf16(x[b + 2 * i + 1]);
    }
  }
}

// One of the two AVX-512 MXFP4 bodies: checks, x in the body's layout (once per call; the
// buffer is reused per calling thread, as the experts call this three times per expert per
// layer), then the body.
template <class XElem, class Body>
void RunAvx512Body(const Mxfp4Mat& W, const float* X, int64_t T, float* Y, bool cpu_has,
                   const char* name, void (*layout)(const float*, int64_t, XElem*), Body body) {
  if (!CheckAvx512Body(W, X, T, Y, cpu_has, name)) return;
  thread_local std::vector<XElem> xl;
  xl.resize(static_cast<size_t>(T * W.cols));
  layout(X, T * W.cols, xl.data());
  body(W.packed, W.scales, W.rows, W.cols, Tables().scale, xl.data(), T, Y);
}

// The vector dense bodies; `wide` runs one token on the AVX-512 body (DenseAvx512T1).
void DenseVector(const DenseMat& W, const float* X, int64_t T, float* Y, bool wide) {
  CheckDense(W);
  if (!CheckActivations(W.rows, W.cols, X, T, Y)) return;
  if (T > kRowTile) {  // kRowTile rows at a time: the split x below stays bounded (common/row_tile.h)
    for (int64_t t0 = 0; t0 < T; t0 += kRowTile)
      DenseVector(W, X + t0 * W.cols, std::min(kRowTile, T - t0), Y + t0 * W.rows, wide);
    return;
  }
  const bool bf16 = W.format == WFormat::BF16;
  // Reused per calling thread: decode calls this hundreds of times per token.
  thread_local std::vector<float> x_split;
  if (bf16) x_split.resize(static_cast<size_t>(T * detail::Bf16XStride(W.cols)));
  float* xs = bf16 ? x_split.data() : nullptr;
  if (wide && T == 1) {
    detail::DenseAvx512T1(W.data, bf16, W.rows, W.cols, X, xs, Y);
  } else {
    detail::DenseAvx2(W.data, bf16, W.rows, W.cols, X, T, xs, Y);
  }
}

}  // namespace

float E2M1Value(uint8_t nibble) { return kE2M1[nibble & 0x0F]; }

float E8M0Scale(uint8_t s) {
  if (s == 255) return std::numeric_limits<float>::quiet_NaN();
  return std::ldexp(1.0f, static_cast<int>(s) - 127);
}

uint16_t F32ToBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  // NaN: keep sign and top payload bits, force the quiet bit so truncation cannot make an Inf.
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);
  // Round to nearest, ties to even: add 0x7FFF plus the lowest kept bit, then truncate.
  // Values that round past the largest finite bf16 become Inf, as they should.
  u += 0x7FFFu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

bool CpuHasAvx2Fma() {
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return has;
}

bool CpuHasAvx512() {
  static const bool has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vl");
  return has;
}

bool CpuHasAvx512Bf16() {
  static const bool has = CpuHasAvx512() && __builtin_cpu_supports("avx512bf16");
  return has;
}

const char* ActiveIsa() { return UseAvx512() ? "avx512" : UseAvx2() ? "avx2" : "scalar"; }

const char* ActiveMxfp4Bf16InIsa() { return UseAvx512Bf16() ? "avx512bf16" : ActiveIsa(); }

void MatmulScalar(const DenseMat& W, const float* X, int64_t T, float* Y) {
  CheckDense(W);
  if (!CheckActivations(W.rows, W.cols, X, T, Y)) return;
  detail::DenseScalar(W.data, W.format == WFormat::BF16, W.rows, W.cols, X, T, Y);
}

void MatmulAvx2(const DenseMat& W, const float* X, int64_t T, float* Y) {
  CheckAvx2();
  DenseVector(W, X, T, Y, false);
}

void MatmulAvx512(const DenseMat& W, const float* X, int64_t T, float* Y) {
  if (!CpuHasAvx512()) {
    throw RuntimeFailure("matmul: AVX-512 (F/BW/VL) kernel called on a CPU without it");
  }
  DenseVector(W, X, T, Y, true);
}

void Matmul(const DenseMat& W, const float* X, int64_t T, float* Y) {
  if (UseAvx512()) {
    MatmulAvx512(W, X, T, Y);
  } else if (UseAvx2()) {
    MatmulAvx2(W, X, T, Y);
  } else {
    MatmulScalar(W, X, T, Y);
  }
}

void MatmulMxfp4Scalar(const Mxfp4Mat& W, const float* X, int64_t T, float* Y) {
  CheckMxfp4(W);
  if (!CheckActivations(W.rows, W.cols, X, T, Y)) return;
  detail::Mxfp4Scalar(W.packed, W.scales, W.rows, W.cols, W.group, Tables().scale, X, T, Y);
}

void MatmulMxfp4Avx2(const Mxfp4Mat& W, const float* X, int64_t T, float* Y) {
  CheckMxfp4(W);
  CheckAvx2();
  if (!CheckActivations(W.rows, W.cols, X, T, Y)) return;
  if (W.group % 32 != 0) {
    // The vector body decodes 32 codes at a time; other group sizes never occur in K3.
    detail::Mxfp4Scalar(W.packed, W.scales, W.rows, W.cols, W.group, Tables().scale, X, T, Y);
    return;
  }
  std::vector<float> x_perm(static_cast<size_t>(T * W.cols));
  detail::Mxfp4Avx2(W.packed, W.scales, W.rows, W.cols, W.group, Tables().scale, X, T, x_perm.data(), Y);
}

void MatmulMxfp4Avx512(const Mxfp4Mat& W, const float* X, int64_t T, float* Y) {
  RunAvx512Body<float>(W, X, T, Y, CpuHasAvx512(), "AVX-512 (F/BW/VL)", Mxfp4F32XLayout, detail::Mxfp4Avx512);
}

void MatmulMxfp4(const Mxfp4Mat& W, const float* X, int64_t T, float* Y) {
  if (UseAvx512() && W.group == 32) {
    MatmulMxfp4Avx512(W, X, T, Y);
  } else if (UseAvx2()) {
    MatmulMxfp4Avx2(W, X, T, Y);
  } else {
    MatmulMxfp4Scalar(W, X, T, Y);
  }
}

void MatmulMxfp4Bf16InAvx512(const Mxfp4Mat& W, const float* X, int64_t T, float* Y) {
  RunAvx512Body<uint16_t>(W, X, T, Y, CpuHasAvx512Bf16(), "AVX512-BF16", Mxfp4Bf16XLayout,
                          detail::Mxfp4Bf16InAvx512);
}

void MatmulMxfp4Bf16In(const Mxfp4Mat& W, const float* X, int64_t T, float* Y) {
  if (UseAvx512Bf16() && W.group == 32) {
    MatmulMxfp4Bf16InAvx512(W, X, T, Y);
    return;
  }
  CheckMxfp4(W);
  if (!CheckActivations(W.rows, W.cols, X, T, Y)) return;
  thread_local std::vector<float> xr;
  xr.resize(static_cast<size_t>(T * W.cols));
  for (int64_t i = 0; i < T * W.cols; ++i) xr[i] = Bf16ToF32(F32ToBf16(X[i]));
  MatmulMxfp4(W, xr.data(), T, Y);
}

void MatmulTransposedRows(const DenseMat& W, int64_t row0, int64_t n, const float* x, float* y) {
  CheckDense(W);
  if (row0 < 0 || n < 0 || row0 + n > W.rows) {
    throw RuntimeFailure("matmul: transposed rows [" + std::to_string(row0) + ", " +
                         std::to_string(row0 + n) + ") outside " + Shape(W.rows, W.cols));
  }
  if (W.cols == 0) return;
  if (y == nullptr || (x == nullptr && n > 0)) throw RuntimeFailure("matmul: null x or y");
  for (int64_t c = 0; c < W.cols; ++c) y[c] = 0.0f;
  // Fixed order over i; the loop over c vectorises without reassociating anything.
  for (int64_t i = 0; i < n; ++i) {
    const float xi = x[i];
    const int64_t r = row0 + i;
    if (W.format == WFormat::F32) {
      const float* w = static_cast<const float*>(W.data) + r * W.cols;
      for (int64_t c = 0; c < W.cols; ++c) y[c] += xi * w[c];
    } else {
      const uint16_t* w = static_cast<const uint16_t*>(W.data) + r * W.cols;
      for (int64_t c = 0; c < W.cols; ++c) y[c] += xi * Bf16ToF32(w[c]);
    }
  }
}

void RowToFloat(const DenseMat& W, int64_t row, float* out) {
  CheckDense(W);
  if (row < 0 || row >= W.rows) {
    throw RuntimeFailure("matmul: row " + std::to_string(row) + " outside " + Shape(W.rows, W.cols));
  }
  if (W.format == WFormat::F32) {
    std::memcpy(out, static_cast<const float*>(W.data) + row * W.cols, W.cols * sizeof(float));
  } else {
    const uint16_t* w = static_cast<const uint16_t*>(W.data) + row * W.cols;
    for (int64_t c = 0; c < W.cols; ++c) out[c] = Bf16ToF32(w[c]);
  }
}

void Mxfp4RowToFloat(const Mxfp4Mat& W, int64_t row, float* out) {
  CheckMxfp4(W);
  if (row < 0 || row >= W.rows) {
    throw RuntimeFailure("mxfp4: row " + std::to_string(row) + " outside " + Shape(W.rows, W.cols));
  }
  const uint8_t* p = W.packed + row * (W.cols / 2);
  const uint8_t* s = W.scales + row * (W.cols / W.group);
  const float* scale = Tables().scale;
  for (int64_t c = 0; c < W.cols; ++c) {
    const uint8_t code = (c % 2 == 0) ? (p[c / 2] & 0x0F) : (p[c / 2] >> 4);
    out[c] = kE2M1[code] * scale[s[c / W.group]];  // exact: power-of-two scaling
  }
}

}  // namespace k3::kern
