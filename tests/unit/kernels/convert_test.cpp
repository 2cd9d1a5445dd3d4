// F32ToBf16 rounding, ISA selection and argument checks.
#include <cstdlib>
#include <cstring>
#include <limits>

#include "common/error.h"
#include "kernel_test_util.h"

namespace k3::kern::test {
namespace {

float FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Independent oracle: of the two bf16 neighbours of f, the nearer in double, ties to even.
uint16_t NearestBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint16_t down = static_cast<uint16_t>(u >> 16);
  const uint16_t up = static_cast<uint16_t>(down + 1);
  const double dd = std::fabs(static_cast<double>(f) - Bf16ToF32(down));
  const double du = std::fabs(static_cast<double>(f) - Bf16ToF32(up));
  if (dd < du) return down;
  if (du < dd) return up;
  return (down & 1) ? up : down;
}

TEST(Bf16, HandPickedRounding) {
  EXPECT_EQ(F32ToBf16(1.0f), 0x3F80);
  EXPECT_EQ(F32ToBf16(-2.0f), 0xC000);
  EXPECT_EQ(F32ToBf16(FromBits(0x3F808000)), 0x3F80);  // tie, 0x3F80 is even: down
  EXPECT_EQ(F32ToBf16(FromBits(0x3F818000)), 0x3F82);  // tie, 0x3F81 is odd: up
  EXPECT_EQ(F32ToBf16(FromBits(0x3F808001)), 0x3F81);  // just above the tie: up
  EXPECT_EQ(F32ToBf16(FromBits(0x3F807FFF)), 0x3F80);  // just below: down
  EXPECT_EQ(F32ToBf16(FromBits(0xBF818000)), 0xBF82);  // negative tie
  EXPECT_EQ(F32ToBf16(std::numeric_limits<float>::max()), 0x7F80);  // rounds to +Inf
  EXPECT_EQ(F32ToBf16(std::numeric_limits<float>::infinity()), 0x7F80);
  EXPECT_EQ(F32ToBf16(-std::numeric_limits<float>::infinity()), 0xFF80);
  EXPECT_EQ(F32ToBf16(0.0f), 0x0000);
  EXPECT_EQ(F32ToBf16(-0.0f), 0x8000);
  EXPECT_EQ(F32ToBf16(FromBits(0x00000001)), 0x0000);  // smallest subnormal rounds to 0
}

TEST(Bf16, NaNStaysNaN) {
  // Payload only in the low 16 bits: plain truncation would turn these into +-Inf.
  for (uint32_t bits : {0x7F800001u, 0xFF800001u, 0x7FC00000u, 0x7FFFFFFFu, 0xFFC12345u}) {
    const uint16_t b = F32ToBf16(FromBits(bits));
    EXPECT_TRUE(std::isnan(Bf16ToF32(b))) << std::hex << bits;
    EXPECT_EQ(b >> 15, bits >> 31) << "sign of " << std::hex << bits;
  }
}

TEST(Bf16, RoundTripsEveryBf16) {
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const float f = Bf16ToF32(static_cast<uint16_t>(b));
    if (std::isnan(f)) continue;
    ASSERT_EQ(F32ToBf16(f), b) << std::hex << b;
  }
}

TEST(Bf16, MatchesNearestEvenOracle) {
  std::mt19937 rng(7);
  for (int i = 0; i < 1000000; ++i) {
    const float f = FromBits(static_cast<uint32_t>(rng()));
    if (std::isnan(f) || std::isinf(f)) continue;
    uint32_t u;
    std::memcpy(&u, &f, 4);
    if ((u & 0x7FFF0000u) == 0x7F7F0000u) continue;  // `up` neighbour would be Inf/NaN bits
    ASSERT_EQ(F32ToBf16(f), NearestBf16(f)) << std::hex << u;
  }
}

TEST(Isa, SelectionFollowsCpuAndEnvironment) {
  const char* force = std::getenv("K3_FORCE_SCALAR");
  const bool forced = force != nullptr && std::string(force) == "1";
  const char* no512 = std::getenv("K3_NO_AVX512");
  const bool no_avx512 = no512 != nullptr && std::string(no512) == "1";
  const std::string isa = ActiveIsa();
  if (forced || !CpuHasAvx2Fma()) {
    EXPECT_EQ(isa, "scalar");
  } else if (!no_avx512 && CpuHasAvx512()) {
    EXPECT_EQ(isa, "avx512");
  } else {
    EXPECT_EQ(isa, "avx2");
  }
  const std::string bf16in = ActiveMxfp4Bf16InIsa();
  EXPECT_EQ(bf16in, isa == "avx512" && CpuHasAvx512Bf16() ? "avx512bf16" : isa);
}

template <typename Fn>
void ExpectError(Fn fn, k3::ExitCode code, const char* what) {
  try {
    fn();
    ADD_FAILURE() << what << ": no error";
  } catch (const k3::Error& e) {
    EXPECT_EQ(e.code(), code) << what << ": " << e.what();
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << "one-line message";
  }
}

TEST(Errors, BadShapesAreReported) {
  std::vector<uint8_t> packed(64), scales(4);
  std::vector<float> x(64), y(4);
  const float* X = x.data();
  float* Y = y.data();
  ExpectError([&] { MatmulMxfp4(Mxfp4Mat{packed.data(), scales.data(), 1, 48, 32}, X, 1, Y); },
              k3::kExitBadModel, "cols not a multiple of group");
  ExpectError([&] { MatmulMxfp4(Mxfp4Mat{packed.data(), scales.data(), 1, 63, 63}, X, 1, Y); },
              k3::kExitBadModel, "odd group");
  ExpectError([&] { MatmulMxfp4(Mxfp4Mat{packed.data(), scales.data(), 1, 64, 0}, X, 1, Y); },
              k3::kExitBadModel, "zero group");
  ExpectError([&] { MatmulMxfp4(Mxfp4Mat{nullptr, scales.data(), 1, 64, 32}, X, 1, Y); },
              k3::kExitBadModel, "null packed");
  ExpectError([&] { MatmulMxfp4(Mxfp4Mat{packed.data(), scales.data(), 1, 64, 32}, X, -1, Y); },
              k3::kExitRuntime, "negative T");
  ExpectError([&] { Matmul(DenseMat{nullptr, WFormat::F32, 2, 2}, X, 1, Y); }, k3::kExitBadModel,
              "null dense data");
  ExpectError([&] { Matmul(DenseMat{x.data(), WFormat::F32, -1, 2}, X, 1, Y); }, k3::kExitBadModel,
              "negative rows");
  ExpectError([&] { Matmul(DenseMat{x.data(), static_cast<WFormat>(9), 2, 2}, X, 1, Y); },
              k3::kExitBadModel, "unknown format");
  ExpectError([&] { Matmul(DenseMat{x.data(), WFormat::F32, 2, 2}, nullptr, 1, Y); },
              k3::kExitRuntime, "null X");
  ExpectError([&] { MatmulTransposedRows(DenseMat{x.data(), WFormat::F32, 4, 4}, 2, 3, X, Y); },
              k3::kExitRuntime, "transposed rows out of range");
  ExpectError([&] { Mxfp4RowToFloat(Mxfp4Mat{packed.data(), scales.data(), 1, 64, 32}, 1, Y); },
              k3::kExitRuntime, "row out of range");
}

}  // namespace
}  // namespace k3::kern::test
