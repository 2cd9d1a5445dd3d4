// MXFP4 products and decoding: every byte value, every scale byte, nibble order, odd shapes,
// the scalar, AVX2 and AVX-512 bodies against an independent double-precision decoder; the bf16-input product
// (MatmulMxfp4Bf16In, dispatched and AVX512-BF16 body) against the same decoder on x rounded to
// bf16 by an independent rounding.
#include <string>
#include <tuple>

#include "kernel_test_util.h"

namespace k3::kern::test {
namespace {

struct Mxfp4Case {
  std::vector<uint8_t> packed, scales;
  std::vector<std::vector<double>> rows_d;
  Mxfp4Mat mat;
};

Mxfp4Case MakeMxfp4(std::vector<uint8_t> packed, std::vector<uint8_t> scales, int64_t rows,
                    int64_t cols, int64_t group = 32) {
  Mxfp4Case c;
  c.packed = std::move(packed);
  c.scales = std::move(scales);
  c.mat = Mxfp4Mat{c.packed.data(), c.scales.data(), rows, cols, group};
  c.rows_d.assign(rows, std::vector<double>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t k = 0; k < cols; ++k) {
      c.rows_d[r][k] = RefMxfp4Element(&c.packed[r * cols / 2], &c.scales[r * (cols / group)], k, group);
    }
  }
  return c;
}

// Realistic scales (the released w1 uses 120..122) with some spread.
Mxfp4Case RandomMxfp4(int64_t rows, int64_t cols, uint32_t seed, int64_t group = 32) {
  return MakeMxfp4(RandomBytes(rows * cols / 2, seed), RandomBytes(rows * (cols / group), seed + 1, 110, 135),
                   rows, cols, group);
}

// The f32-input bodies this CPU can run for a group size (the AVX-512 one takes group 32 only).
struct Body {
  const char* name;
  void (*fn)(const Mxfp4Mat&, const float*, int64_t, float*);
};
std::vector<Body> F32Bodies(int64_t group) {
  std::vector<Body> bodies = {{"mxfp4 scalar", MatmulMxfp4Scalar}};
  if (CpuHasAvx2Fma()) bodies.push_back({"mxfp4 avx2", MatmulMxfp4Avx2});
  if (CpuHasAvx512() && group == 32) bodies.push_back({"mxfp4 avx512", MatmulMxfp4Avx512});
  return bodies;
}

void RunBodies(const Mxfp4Case& c, const std::vector<float>& X, int64_t T, double rel) {
  std::vector<float> y(T * c.mat.rows);
  for (const Body& b : F32Bodies(c.mat.group)) {
    std::fill(y.begin(), y.end(), -7.0f);
    b.fn(c.mat, X.data(), T, y.data());
    ExpectNearRef(c.rows_d, X.data(), T, y.data(), rel, b.name);
  }
}

// Nearest bf16 (8 significant bits, ties to even) via frexp and nearbyint (the default rounding
// mode is to nearest even), written apart from the library's bit trick. Normal range only.
float RefRoundBf16(float v) {
  int e = 0;
  const double m = std::frexp(static_cast<double>(v), &e);  // [0.5, 1)
  return static_cast<float>(std::ldexp(std::nearbyint(m * 256.0) / 256.0, e));
}

std::vector<float> RoundedToBf16(const std::vector<float>& x) {
  std::vector<float> r(x.size());
  for (size_t i = 0; i < x.size(); ++i) r[i] = RefRoundBf16(x[i]);
  return r;
}

// The bf16-input product equals the double-precision product of the rounded x (every product is
// exact; only the f32 sums round).
void RunBf16In(const Mxfp4Case& c, const std::vector<float>& X, int64_t T, double rel) {
  const std::vector<float> xr = RoundedToBf16(X);
  std::vector<float> y(T * c.mat.rows, -7.0f);
  MatmulMxfp4Bf16In(c.mat, X.data(), T, y.data());
  ExpectNearRef(c.rows_d, xr.data(), T, y.data(), rel, "mxfp4 bf16-in dispatched");
  if (CpuHasAvx512Bf16() && c.mat.group == 32) {
    std::fill(y.begin(), y.end(), -7.0f);
    MatmulMxfp4Bf16InAvx512(c.mat, X.data(), T, y.data());
    ExpectNearRef(c.rows_d, xr.data(), T, y.data(), rel, "mxfp4 bf16-in avx512");
  }
}

using Shape = std::tuple<int64_t, int64_t, int64_t>;  // rows, cols, T
class Mxfp4Shapes : public ::testing::TestWithParam<Shape> {};

TEST_P(Mxfp4Shapes, EveryBodyMatchesDoubleReference) {
  const auto [rows, cols, T] = GetParam();
  const Mxfp4Case c = RandomMxfp4(rows, cols, static_cast<uint32_t>(rows * 31 + cols));
  RunBodies(c, RandomFloats(static_cast<size_t>(T * cols), 7), T, 1e-5);
}

TEST_P(Mxfp4Shapes, Bf16InputsMatchDoubleReferenceOnRoundedX) {
  const auto [rows, cols, T] = GetParam();
  const Mxfp4Case c = RandomMxfp4(rows, cols, static_cast<uint32_t>(rows * 37 + cols));
  RunBf16In(c, RandomFloats(static_cast<size_t>(T * cols), 9), T, 1e-5);
}

INSTANTIATE_TEST_SUITE_P(OddSizes, Mxfp4Shapes,
                         ::testing::Combine(::testing::Values(1, 5, 17, 33),
                                            ::testing::Values(32, 64, 96, 352),
                                            ::testing::Values(1, 2, 3, 4, 7)));

TEST(Mxfp4, WiderGroupsMatchReference) {
  // Group 64 uses the AVX2 body's multi-block groups; group 16 falls back to the scalar body.
  // (Neither reaches the AVX-512 body, which takes group 32 only: checked below.)
  RunBodies(RandomMxfp4(9, 256, 41, 64), RandomFloats(3 * 256, 42), 3, 1e-5);
  RunBodies(RandomMxfp4(9, 96, 43, 16), RandomFloats(2 * 96, 44), 2, 1e-5);
}

TEST(Mxfp4, EveryByteValueDecodesAndMultiplies) {
  // One row per scale in {120, 127}: bytes 0..255 in order, so each byte appears once.
  const int64_t cols = 512;
  std::vector<uint8_t> packed(2 * 256), scales(2 * 16);
  for (int r = 0; r < 2; ++r) {
    for (int b = 0; b < 256; ++b) packed[r * 256 + b] = static_cast<uint8_t>(b);
    for (int g = 0; g < 16; ++g) scales[r * 16 + g] = r == 0 ? 120 : 127;
  }
  const Mxfp4Case c = MakeMxfp4(packed, scales, 2, cols);
  std::vector<float> row(cols);
  for (int r = 0; r < 2; ++r) {
    Mxfp4RowToFloat(c.mat, r, row.data());
    for (int64_t k = 0; k < cols; ++k) {
      ASSERT_EQ(static_cast<double>(row[k]), c.rows_d[r][k]) << "row " << r << " col " << k;
      ASSERT_EQ(std::signbit(row[k]), std::signbit(c.rows_d[r][k])) << "row " << r << " col " << k;
    }
  }
  RunBodies(c, RandomFloats(3 * cols, 11), 3, 1e-5);
  RunBf16In(c, RandomFloats(3 * cols, 12), 3, 1e-5);
}

TEST(Mxfp4, HandWrittenValues) {
  // Spec table, written out by hand.
  const float want[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, -0.0f, -0.5f, -1, -1.5f, -2, -3, -4, -6};
  for (int i = 0; i < 16; ++i) {
    EXPECT_EQ(E2M1Value(static_cast<uint8_t>(i)), want[i]) << i;
    EXPECT_EQ(std::signbit(E2M1Value(static_cast<uint8_t>(i))), i >= 8) << i;
  }
  EXPECT_EQ(E8M0Scale(127), 1.0f);
  EXPECT_EQ(E8M0Scale(128), 2.0f);
  EXPECT_EQ(E8M0Scale(120), 1.0f / 128.0f);
  EXPECT_EQ(static_cast<double>(E8M0Scale(0)), std::ldexp(1.0, -127));  // subnormal, not 0
  EXPECT_GT(E8M0Scale(0), 0.0f);
  EXPECT_EQ(static_cast<double>(E8M0Scale(254)), std::ldexp(1.0, 127));
  EXPECT_TRUE(std::isnan(E8M0Scale(255)));
}

TEST(Mxfp4, NibbleOrderLowIsEven) {
  // Byte 0x71: element 0 is code 1 (0.5), element 1 is code 7 (6).
  std::vector<uint8_t> packed(16, 0);
  packed[0] = 0x71;
  const uint8_t scale[1] = {128};  // 2.0
  const Mxfp4Mat w{packed.data(), scale, 1, 32, 32};
  std::vector<float> x0(32, 0.0f), x1(32, 0.0f);
  x0[0] = 1.0f;
  x1[1] = 1.0f;
  for (const Body& b : F32Bodies(32)) {
    float y = 0;
    b.fn(w, x0.data(), 1, &y);
    EXPECT_EQ(y, 1.0f) << b.name;
    b.fn(w, x1.data(), 1, &y);
    EXPECT_EQ(y, 12.0f) << b.name;
  }
}

TEST(Mxfp4, EveryScaleByteExact) {
  // One element 1.0 (code 2) in the group and x = 1: the output is exactly 2^(s-127), also
  // for s = 0 (subnormal) and s = 254.
  for (int s = 0; s < 255; ++s) {
    std::vector<uint8_t> packed(32, 0);
    packed[5] = 0x20;  // element 11 = code 2
    const uint8_t scales[2] = {static_cast<uint8_t>(s), 127};
    const Mxfp4Mat w{packed.data(), scales, 1, 64, 32};
    const std::vector<float> x(64, 1.0f);
    const double want = std::ldexp(1.0, s - 127);
    float y = 0;
    for (const Body& b : F32Bodies(32)) {
      b.fn(w, x.data(), 1, &y);
      EXPECT_EQ(static_cast<double>(y), want) << b.name << ", scale byte " << s;
    }
    MatmulMxfp4Bf16In(w, x.data(), 1, &y);  // x = 1 is exact in bf16
    EXPECT_EQ(static_cast<double>(y), want) << "bf16-in dispatched, scale byte " << s;
    if (CpuHasAvx512Bf16()) {
      MatmulMxfp4Bf16InAvx512(w, x.data(), 1, &y);
      EXPECT_EQ(static_cast<double>(y), want) << "bf16-in avx512, scale byte " << s;
    }
  }
}

TEST(Mxfp4, EveryScaleByteRandomContent) {
  // Random codes under each scale; x is shrunk for large scales so nothing overflows.
  for (int s = 0; s < 255; ++s) {
    const int64_t cols = 96;
    auto packed = RandomBytes(cols / 2, 1000 + s);
    std::vector<uint8_t> scales(3, static_cast<uint8_t>(s));
    const Mxfp4Case c = MakeMxfp4(packed, scales, 1, cols);
    const float shrink = s > 200 ? std::ldexp(1.0f, -20) : 1.0f;
    auto x = RandomFloats(2 * cols, 2000 + s, -shrink, shrink);
    SCOPED_TRACE("scale byte " + std::to_string(s));
    RunBodies(c, x, 2, 1e-5);
  }
}

TEST(Mxfp4, Scale255IsNaNForItsRowOnly) {
  const int64_t rows = 3, cols = 64;
  auto packed = RandomBytes(rows * cols / 2, 5);
  std::vector<uint8_t> scales = {120, 121, 122, 255, 127, 126};  // row 1, group 1 is NaN
  const Mxfp4Mat w{packed.data(), scales.data(), rows, cols, 32};
  const auto x = RandomFloats(cols, 6);
  std::vector<float> y(rows);
  for (const Body& b : F32Bodies(32)) {
    b.fn(w, x.data(), 1, y.data());
    EXPECT_FALSE(std::isnan(y[0])) << b.name;
    EXPECT_TRUE(std::isnan(y[1])) << b.name;
    EXPECT_FALSE(std::isnan(y[2])) << b.name;
  }
  MatmulMxfp4Bf16In(w, x.data(), 1, y.data());
  EXPECT_FALSE(std::isnan(y[0]));
  EXPECT_TRUE(std::isnan(y[1]));
  EXPECT_FALSE(std::isnan(y[2]));
  std::vector<float> row(cols);
  Mxfp4RowToFloat(w, 1, row.data());
  EXPECT_FALSE(std::isnan(row[31]));
  EXPECT_TRUE(std::isnan(row[32]));
}

TEST(Mxfp4, RealExpertSize) {
  // One w2-shaped slice (rows of 3072 inputs) and one w1-shaped slice (3584 inputs).
  RunBodies(RandomMxfp4(21, 3072, 77), RandomFloats(3072 * 5, 78), 5, 1e-5);
  RunBodies(RandomMxfp4(13, 3584, 79), RandomFloats(3584, 80), 1, 1e-5);
}

TEST(Mxfp4, DispatchRunsTheNamedBody) {
  // MatmulMxfp4 gives bit for bit what the body ActiveIsa() names gives, at group 32; other
  // groups never reach the AVX-512 body, which refuses them.
  const Mxfp4Case c = RandomMxfp4(19, 3584, 91);
  const auto x = RandomFloats(3584 * 3, 92);
  std::vector<float> yd(3 * 19), yb(3 * 19);
  MatmulMxfp4(c.mat, x.data(), 3, yd.data());
  const std::string isa = ActiveIsa();
  if (isa == "avx512") {
    MatmulMxfp4Avx512(c.mat, x.data(), 3, yb.data());
  } else if (isa == "avx2") {
    MatmulMxfp4Avx2(c.mat, x.data(), 3, yb.data());
  } else {
    ASSERT_EQ(isa, "scalar");
    MatmulMxfp4Scalar(c.mat, x.data(), 3, yb.data());
  }
  EXPECT_TRUE(BitEqual(yd, yb)) << isa;
  if (CpuHasAvx512()) {
    const Mxfp4Case c64 = RandomMxfp4(3, 128, 93, 64);
    EXPECT_THROW(MatmulMxfp4Avx512(c64.mat, x.data(), 1, yb.data()), k3::Error);
  }
}

TEST(Mxfp4Bf16In, RoundsInputsToNearestEven) {
  // Element 0 is 1.0 (code 2, scale 2^0), the rest 0: y is the rounded x[0] exactly.
  std::vector<uint8_t> packed(16, 0);
  packed[0] = 0x02;
  const uint8_t scale[1] = {127};
  const Mxfp4Mat w{packed.data(), scale, 1, 32, 32};
  // {x, its bf16 by hand}: below half a step, exactly half (tie to the even 1.0), half above an
  // odd mantissa (tie up to the even 1 + 2^-6), a negative value, and one already exact.
  const float cases[][2] = {{1.0f + 0x1p-9f, 1.0f},
                            {1.0f + 0x1p-8f, 1.0f},
                            {1.0f + 3 * 0x1p-8f, 1.0f + 0x1p-6f},
                            {-(1.0f + 0x1p-7f + 0x1p-9f), -(1.0f + 0x1p-7f)},
                            {0.75f, 0.75f}};
  for (const auto& cs : cases) {
    std::vector<float> x(32, 0.0f);
    x[0] = cs[0];
    float y = 0;
    MatmulMxfp4Bf16In(w, x.data(), 1, &y);
    EXPECT_EQ(y, cs[1]) << "dispatched, x = " << cs[0];
    if (CpuHasAvx512Bf16()) {
      MatmulMxfp4Bf16InAvx512(w, x.data(), 1, &y);
      EXPECT_EQ(y, cs[1]) << "avx512, x = " << cs[0];
    }
  }
}

TEST(Mxfp4Bf16In, OtherGroupSizesFallBack) {
  // Group 64 and 16: the dispatched product still rounds and matches; the AVX512 body refuses.
  const Mxfp4Case c64 = RandomMxfp4(9, 256, 45, 64), c16 = RandomMxfp4(9, 96, 46, 16);
  RunBf16In(c64, RandomFloats(3 * 256, 47), 3, 1e-5);
  RunBf16In(c16, RandomFloats(2 * 96, 48), 2, 1e-5);
  if (CpuHasAvx512Bf16()) {
    std::vector<float> y(9), x(256, 1.0f);
    EXPECT_THROW(MatmulMxfp4Bf16InAvx512(c64.mat, x.data(), 1, y.data()), k3::Error);
  }
}

TEST(Mxfp4Bf16In, RealExpertSize) {
  RunBf16In(RandomMxfp4(21, 3072, 81), RandomFloats(3072 * 5, 82), 5, 1e-5);
  RunBf16In(RandomMxfp4(13, 3584, 83), RandomFloats(3584, 84), 1, 1e-5);
}

}  // namespace
}  // namespace k3::kern::test
