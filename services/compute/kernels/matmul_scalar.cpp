// Portable twin of the AVX2 kernels: plain loops, no intrinsics. Also the reference the tests
// compare the AVX2 path against, so it favours clarity; it still vectorises (8 independent
// partial sums map onto SSE registers without changing the arithmetic).
#include <cstring>
#include <vector>

#include "kernels_detail.h"

namespace k3::kern::detail {
namespace {

constexpr int kLanes = 8;

// One fixed-order dot product: partial sum k takes columns c with c % 8 == k, then a fixed
// pairwise tree. The order depends only on n, which is what the determinism contract needs.
float Dot(const float* w, const float* x, int64_t n) {
  float acc[kLanes] = {};
  int64_t c = 0;
  for (; c + kLanes <= n; c += kLanes) {
    for (int k = 0; k < kLanes; ++k) acc[k] += w[c + k] * x[c + k];
  }
  for (int k = 0; c + k < n; ++k) acc[k] += w[c + k] * x[c + k];
  return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

// bf16 -> f32 is a 16-bit shift, exact, so widening a row first changes no product.
void WidenBf16(const uint16_t* src, int64_t n, float* dst) {
  for (int64_t c = 0; c < n; ++c) {
    const uint32_t u = static_cast<uint32_t>(src[c]) << 16;
    std::memcpy(&dst[c], &u, 4);
  }
}

// E2M1 code -> value; bit 3 is the sign (see docs/model.md, "MXFP4 experts").
constexpr float kE2M1[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                             -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

}  // namespace

void DenseScalar(const void* w, bool bf16, int64_t rows, int64_t cols, const float* x, int64_t T,
                 float* y) {
  const int64_t nblocks = (rows + kRowBlock - 1) / kRowBlock;
  const bool parallel = rows * cols * T >= kParallelMinWork;
#pragma omp parallel if (parallel)
  {
    std::vector<float> row(bf16 ? static_cast<size_t>(cols) : 0);
#pragma omp for schedule(static)
    for (int64_t b = 0; b < nblocks; ++b) {
      const int64_t r1 = (b + 1) * kRowBlock < rows ? (b + 1) * kRowBlock : rows;
      for (int64_t r = b * kRowBlock; r < r1; ++r) {
        const float* wr;
        if (bf16) {
          WidenBf16(static_cast<const uint16_t*>(w) + r * cols, cols, row.data());
          wr = row.data();
        } else {
          wr = static_cast<const float*>(w) + r * cols;
        }
        // The row stays in cache while every token uses it.
        for (int64_t t = 0; t < T; ++t) y[t * rows + r] = Dot(wr, x + t * cols, cols);
      }
    }
  }
}

void Mxfp4Scalar(const uint8_t* packed, const uint8_t* scales, int64_t rows, int64_t cols,
                 int64_t group, const float* scale, const float* x, int64_t T, float* y) {
  const int64_t nblocks = (rows + kRowBlock - 1) / kRowBlock;
  const int64_t ngroups = cols / group;
  const bool parallel = rows * cols * T >= kParallelMinWork;
#pragma omp parallel if (parallel)
  {
    // Unscaled E2M1 values of one row: decoded once, reused by every token.
    std::vector<float> row(static_cast<size_t>(cols));
#pragma omp for schedule(static)
    for (int64_t b = 0; b < nblocks; ++b) {
      const int64_t r1 = (b + 1) * kRowBlock < rows ? (b + 1) * kRowBlock : rows;
      for (int64_t r = b * kRowBlock; r < r1; ++r) {
        const uint8_t* pr = packed + r * (cols / 2);
        for (int64_t j = 0; j < cols / 2; ++j) {
          row[2 * j] = kE2M1[pr[j] & 0x0F];  // element 2j: low nibble
          row[2 * j + 1] = kE2M1[pr[j] >> 4];  // element 2j+1: high nibble
        }
        const uint8_t* sr = scales + r * ngroups;
        for (int64_t t = 0; t < T; ++t) {
          const float* xt = x + t * cols;
          float acc = 0.0f;
          for (int64_t g = 0; g < ngroups; ++g) {
            acc += Dot(row.data() + g * group, xt + g * group, group) * scale[sr[g]];
          }
          y[t * rows + r] = acc;
        }
      }
    }
  }
}

}  // namespace k3::kern::detail
