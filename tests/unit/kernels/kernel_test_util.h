// Shared helpers of the kernel tests: random data, an independent MXFP4 decoder written from
// docs/model.md "MXFP4 experts", and double-precision reference products.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "common/error.h"
#include "services/compute/kernels/matmul.h"

namespace k3::kern::test {

inline std::vector<float> RandomFloats(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (auto& f : v) f = dist(rng);
  return v;
}

inline std::vector<uint8_t> RandomBytes(size_t n, uint32_t seed, int lo = 0, int hi = 255) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> dist(lo, hi);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(dist(rng));
  return v;
}

// E2M1 from its bit fields: bit 3 sign, bits 0..2 index {0, .5, 1, 1.5, 2, 3, 4, 6}.
inline double RefE2M1(int code) {
  static const double kMag[8] = {0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0};
  const double m = kMag[code & 7];
  return (code & 8) ? -m : m;
}

// Element c of an MXFP4 row, decoded independently of the library.
inline double RefMxfp4Element(const uint8_t* packed_row, const uint8_t* scale_row, int64_t c,
                              int64_t group) {
  const uint8_t byte = packed_row[c / 2];
  const int code = (c % 2 == 0) ? (byte & 0xF) : (byte >> 4);
  const int s = scale_row[c / group];
  if (s == 255) return std::nan("");
  return RefE2M1(code) * std::ldexp(1.0, s - 127);
}

// y and sum |w*x| for one output, in double.
struct RefValue {
  double y = 0.0;
  double abs_sum = 0.0;
};

inline RefValue RefDot(const std::vector<double>& w_row, const float* x) {
  RefValue r;
  for (size_t c = 0; c < w_row.size(); ++c) {
    r.y += w_row[c] * x[c];
    r.abs_sum += std::fabs(w_row[c] * x[c]);
  }
  return r;
}

// Checks every output against a double-precision product within rel * sum|w*x|.
// `w_rows[r]` is row r of the matrix in double; X is T x cols, Y is T x rows.
inline void ExpectNearRef(const std::vector<std::vector<double>>& w_rows, const float* X, int64_t T,
                          const float* Y, double rel, const char* what) {
  const int64_t rows = static_cast<int64_t>(w_rows.size());
  const int64_t cols = rows ? static_cast<int64_t>(w_rows[0].size()) : 0;
  int failures = 0;
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t r = 0; r < rows; ++r) {
      const RefValue ref = RefDot(w_rows[r], X + t * cols);
      const double got = Y[t * rows + r];
      const double tol = rel * ref.abs_sum + 1e-44;
      if (!(std::fabs(got - ref.y) <= tol) && ++failures <= 5) {
        ADD_FAILURE() << what << ": y[t=" << t << "][r=" << r << "] = " << got << ", reference "
                      << ref.y << " (tolerance " << tol << ", rows " << rows << ", cols " << cols
                      << ", T " << T << ")";
      }
    }
  }
  EXPECT_EQ(failures, 0) << what;
}

inline bool BitEqual(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

#define K3_REQUIRE_AVX2()                                              \
  do {                                                                 \
    if (!::k3::kern::CpuHasAvx2Fma()) GTEST_SKIP() << "CPU lacks AVX2+FMA"; \
  } while (0)

}  // namespace k3::kern::test
