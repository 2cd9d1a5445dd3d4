// Dense (f32, bf16) products: scalar, AVX2 and AVX-512 bodies against a double-precision product
// on odd shapes, the dispatcher, the transposed product and row conversion.
#include <omp.h>

#include <tuple>

#include "kernel_test_util.h"

namespace k3::kern::test {
namespace {

// bf16 value written out independently of the library: the 16 bits are the top of an f32.
double Bf16Bits(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// A random matrix in one format plus its exact values in double.
struct DenseCase {
  std::vector<float> f32;
  std::vector<uint16_t> bf16;
  std::vector<std::vector<double>> rows_d;
  DenseMat mat;
};

DenseCase MakeDense(WFormat fmt, int64_t rows, int64_t cols, uint32_t seed) {
  DenseCase c;
  const auto v = RandomFloats(static_cast<size_t>(rows * cols), seed);
  c.rows_d.assign(rows, std::vector<double>(cols));
  if (fmt == WFormat::F32) {
    c.f32 = v;
    c.mat.data = c.f32.data();
  } else {
    c.bf16.resize(v.size());
    for (size_t i = 0; i < v.size(); ++i) c.bf16[i] = F32ToBf16(v[i]);
    c.mat.data = c.bf16.data();
  }
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t k = 0; k < cols; ++k) {
      const size_t i = static_cast<size_t>(r * cols + k);
      c.rows_d[r][k] = fmt == WFormat::F32 ? v[i] : Bf16Bits(c.bf16[i]);
    }
  }
  c.mat.format = fmt;
  c.mat.rows = rows;
  c.mat.cols = cols;
  return c;
}

using Shape = std::tuple<WFormat, int64_t, int64_t, int64_t>;  // format, rows, cols, T

class DenseShapes : public ::testing::TestWithParam<Shape> {};

TEST_P(DenseShapes, EveryBodyMatchesDoubleReference) {
  const auto [fmt, rows, cols, T] = GetParam();
  const DenseCase c = MakeDense(fmt, rows, cols, static_cast<uint32_t>(rows * 7919 + cols));
  const auto X = RandomFloats(static_cast<size_t>(T * cols), 99);
  std::vector<float> ys(T * rows, -7.0f), yv(T * rows, -7.0f), yd(T * rows, -7.0f);
  MatmulScalar(c.mat, X.data(), T, ys.data());
  ExpectNearRef(c.rows_d, X.data(), T, ys.data(), 1e-5, "scalar");
  Matmul(c.mat, X.data(), T, yd.data());
  if (CpuHasAvx2Fma()) {
    MatmulAvx2(c.mat, X.data(), T, yv.data());
    ExpectNearRef(c.rows_d, X.data(), T, yv.data(), 1e-5, "avx2");
  }
  if (CpuHasAvx512()) {
    // The same arithmetic as the AVX2 body with more rows in flight: identical bits.
    std::vector<float> yw(T * rows, -7.0f);
    MatmulAvx512(c.mat, X.data(), T, yw.data());
    EXPECT_TRUE(BitEqual(yw, yv)) << "avx512 vs avx2";
  }
  // The dispatcher is exactly one of the bodies.
  EXPECT_TRUE(BitEqual(yd, std::string(ActiveIsa()) == "scalar" ? ys : yv));
}

INSTANTIATE_TEST_SUITE_P(
    OddSizes, DenseShapes,
    ::testing::Combine(::testing::Values(WFormat::F32, WFormat::BF16),
                       ::testing::Values(1, 3, 17, 37, 61),       // rows (blocks of 16/8/4; 48/12)
                       ::testing::Values(1, 7, 15, 16, 33, 257, 1000, 1553),  // tails of 16, column chunks
                       ::testing::Values(1, 2, 3, 5, 9)));        // tokens: blocks of 4

TEST(Dense, LargeRowsCancellation) {
  // Alternating-sign rows make the sum small against sum|w*x|; checks the relative bound
  // is about accumulation error, not luck.
  const int64_t rows = 5, cols = 4099;
  std::vector<float> w(rows * cols);
  std::vector<std::vector<double>> wd(rows, std::vector<double>(cols));
  const auto base = RandomFloats(static_cast<size_t>(cols), 5, 0.5f, 1.0f);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t k = 0; k < cols; ++k) {
      w[r * cols + k] = (k % 2 ? -1.0f : 1.0f) * base[k] * static_cast<float>(r + 1);
      wd[r][k] = w[r * cols + k];
    }
  }
  const DenseMat m{w.data(), WFormat::F32, rows, cols};
  const auto x = RandomFloats(static_cast<size_t>(cols), 6, 0.9f, 1.1f);
  std::vector<float> y(rows);
  MatmulScalar(m, x.data(), 1, y.data());
  ExpectNearRef(wd, x.data(), 1, y.data(), 1e-5, "scalar");
  if (CpuHasAvx2Fma()) {
    MatmulAvx2(m, x.data(), 1, y.data());
    ExpectNearRef(wd, x.data(), 1, y.data(), 1e-5, "avx2");
  }
}

TEST(Dense, ZeroColumnsGiveZeros) {
  const DenseMat m{nullptr, WFormat::BF16, 3, 0};
  std::vector<float> y(6, 5.0f);
  Matmul(m, nullptr, 2, y.data());
  for (float v : y) EXPECT_EQ(v, 0.0f);
}

TEST(Dense, TransposedRowsMatchesDouble) {
  for (WFormat fmt : {WFormat::F32, WFormat::BF16}) {
    const int64_t rows = 40, cols = 77, row0 = 9, n = 23;
    const DenseCase c = MakeDense(fmt, rows, cols, 17);
    const auto x = RandomFloats(static_cast<size_t>(n), 18);
    std::vector<float> y(cols, 3.0f);
    MatmulTransposedRows(c.mat, row0, n, x.data(), y.data());
    for (int64_t k = 0; k < cols; ++k) {
      double ref = 0.0, abs = 0.0;
      for (int64_t i = 0; i < n; ++i) {
        ref += x[i] * c.rows_d[row0 + i][k];
        abs += std::fabs(x[i] * c.rows_d[row0 + i][k]);
      }
      EXPECT_NEAR(y[k], ref, 1e-6 * abs + 1e-30) << "col " << k;
    }
  }
}

TEST(Dense, RowToFloatIsExact) {
  const DenseCase c = MakeDense(WFormat::BF16, 4, 19, 3);
  std::vector<float> out(19);
  RowToFloat(c.mat, 2, out.data());
  for (int k = 0; k < 19; ++k) EXPECT_EQ(static_cast<double>(out[k]), c.rows_d[2][k]);
  const DenseCase f = MakeDense(WFormat::F32, 4, 19, 3);
  RowToFloat(f.mat, 3, out.data());
  for (int k = 0; k < 19; ++k) EXPECT_EQ(out[k], f.f32[3 * 19 + k]);
  EXPECT_THROW(RowToFloat(f.mat, 4, out.data()), k3::Error);
}

}  // namespace
}  // namespace k3::kern::test
