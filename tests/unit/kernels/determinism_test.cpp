// The determinism contract of matmul.h, checked bit for bit on both ISAs: one call over T
// tokens equals T single-token calls, any split of the rows gives the same outputs, and the
// thread count changes nothing.
#include <omp.h>

#include <functional>
#include <string>

#include "kernel_test_util.h"

namespace k3::kern::test {
namespace {

// Computes Y (T x rows) for a row range [r0, r1) of the matrix; writes into a T x (r1-r0) buffer.
using RangeFn = std::function<void(int64_t r0, int64_t r1, const float* X, int64_t T, float* Y)>;

struct Kernel {
  std::string name;
  int64_t rows, cols;
  RangeFn run;
};

// Reassembles a full T x rows result from calls on row ranges split at `cuts`.
std::vector<float> RunSplit(const Kernel& k, const std::vector<float>& X, int64_t T,
                            const std::vector<int64_t>& cuts) {
  std::vector<float> Y(T * k.rows);
  int64_t r0 = 0;
  for (size_t i = 0; i <= cuts.size(); ++i) {
    const int64_t r1 = i < cuts.size() ? cuts[i] : k.rows;
    std::vector<float> part(T * (r1 - r0));
    k.run(r0, r1, X.data(), T, part.data());
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t r = r0; r < r1; ++r) Y[t * k.rows + r] = part[t * (r1 - r0) + (r - r0)];
    }
    r0 = r1;
  }
  return Y;
}

void CheckContract(const Kernel& k) {
  SCOPED_TRACE(k.name);
  const int64_t T = 7;
  const auto X = RandomFloats(static_cast<size_t>(T * k.cols), 4242);
  const int saved = omp_get_max_threads();

  omp_set_num_threads(2);
  const auto full = RunSplit(k, X, T, {});

  // Token by token.
  std::vector<float> by_token(T * k.rows);
  for (int64_t t = 0; t < T; ++t) {
    const std::vector<float> xt(X.begin() + t * k.cols, X.begin() + (t + 1) * k.cols);
    const auto yt = RunSplit(k, xt, 1, {});
    std::copy(yt.begin(), yt.end(), by_token.begin() + t * k.rows);
  }
  EXPECT_TRUE(BitEqual(full, by_token)) << "T=7 call differs from seven T=1 calls";

  // Tokens in uneven chunks (2, 4, 1) as chunked prefill would do.
  std::vector<float> chunked(T * k.rows);
  for (int64_t t0 = 0; const int64_t n : {2, 4, 1}) {
    const std::vector<float> xc(X.begin() + t0 * k.cols, X.begin() + (t0 + n) * k.cols);
    const auto yc = RunSplit(k, xc, n, {});
    std::copy(yc.begin(), yc.end(), chunked.begin() + t0 * k.rows);
    t0 += n;
  }
  EXPECT_TRUE(BitEqual(full, chunked)) << "chunks of 2, 4, 1 tokens differ";

  // Rows split at odd places (moves rows between the 4-row and 1-row bodies).
  EXPECT_TRUE(BitEqual(full, RunSplit(k, X, T, {5, 6, 41, k.rows - 3}))) << "row split, T=7";
  const std::vector<float> x0(X.begin(), X.begin() + k.cols);
  const auto one = RunSplit(k, x0, 1, {});
  EXPECT_TRUE(BitEqual(one, RunSplit(k, x0, 1, {1, 3, 22, k.rows - 1}))) << "row split, T=1";

  for (int threads : {1, 3}) {
    omp_set_num_threads(threads);
    EXPECT_TRUE(BitEqual(full, RunSplit(k, X, T, {}))) << threads << " threads, T=7";
    EXPECT_TRUE(BitEqual(one, RunSplit(k, x0, 1, {}))) << threads << " threads, T=1";
  }
  omp_set_num_threads(saved);
}

// Large enough (rows * cols >= the parallel threshold) that T=1 calls go parallel too.
constexpr int64_t kRows = 203, kDenseCols = 1300, kMxCols = 512;  // 1300: several column chunks

Kernel DenseKernel(const std::string& name, const DenseMat& W,
                   void (*fn)(const DenseMat&, const float*, int64_t, float*)) {
  return {name, W.rows, W.cols, [W, fn](int64_t r0, int64_t r1, const float* X, int64_t T, float* Y) {
            DenseMat sub = W;
            const size_t elem = W.format == WFormat::F32 ? 4 : 2;
            sub.data = static_cast<const char*>(W.data) + r0 * W.cols * elem;
            sub.rows = r1 - r0;
            fn(sub, X, T, Y);
          }};
}

Kernel MxKernel(const std::string& name, const Mxfp4Mat& W,
                void (*fn)(const Mxfp4Mat&, const float*, int64_t, float*)) {
  return {name, W.rows, W.cols, [W, fn](int64_t r0, int64_t r1, const float* X, int64_t T, float* Y) {
            Mxfp4Mat sub = W;
            sub.packed = W.packed + r0 * W.cols / 2;
            sub.scales = W.scales + r0 * (W.cols / W.group);
            sub.rows = r1 - r0;
            fn(sub, X, T, Y);
          }};
}

class Determinism : public ::testing::Test {
 protected:
  void SetUp() override {
    f32_ = RandomFloats(kRows * kDenseCols, 1);
    bf16_.resize(f32_.size());
    for (size_t i = 0; i < f32_.size(); ++i) bf16_[i] = F32ToBf16(f32_[i]);
    packed_ = RandomBytes(kRows * kMxCols / 2, 2);
    scales_ = RandomBytes(kRows * kMxCols / 32, 3, 115, 130);
  }
  DenseMat F32() const { return {f32_.data(), WFormat::F32, kRows, kDenseCols}; }
  DenseMat Bf16() const { return {bf16_.data(), WFormat::BF16, kRows, kDenseCols}; }
  Mxfp4Mat Mx() const { return {packed_.data(), scales_.data(), kRows, kMxCols, 32}; }

  std::vector<float> f32_;
  std::vector<uint16_t> bf16_;
  std::vector<uint8_t> packed_, scales_;
};

TEST_F(Determinism, Scalar) {
  CheckContract(DenseKernel("f32 scalar", F32(), MatmulScalar));
  CheckContract(DenseKernel("bf16 scalar", Bf16(), MatmulScalar));
  CheckContract(MxKernel("mxfp4 scalar", Mx(), MatmulMxfp4Scalar));
}

TEST_F(Determinism, Avx2) {
  K3_REQUIRE_AVX2();
  CheckContract(DenseKernel("f32 avx2", F32(), MatmulAvx2));
  CheckContract(DenseKernel("bf16 avx2", Bf16(), MatmulAvx2));
  CheckContract(MxKernel("mxfp4 avx2", Mx(), MatmulMxfp4Avx2));
}

TEST_F(Determinism, Avx512) {
  if (!CpuHasAvx512()) GTEST_SKIP() << "CPU lacks AVX-512 F/BW/VL";
  CheckContract(DenseKernel("f32 avx512", F32(), MatmulAvx512));
  CheckContract(DenseKernel("bf16 avx512", Bf16(), MatmulAvx512));
  CheckContract(MxKernel("mxfp4 avx512", Mx(), MatmulMxfp4Avx512));
}

TEST_F(Determinism, Avx512Bf16) {
  if (!CpuHasAvx512Bf16()) GTEST_SKIP() << "CPU lacks AVX512-BF16";
  CheckContract(MxKernel("mxfp4 bf16-in avx512", Mx(), MatmulMxfp4Bf16InAvx512));
}

TEST_F(Determinism, Dispatched) {
  CheckContract(DenseKernel("f32 dispatched", F32(), Matmul));
  CheckContract(DenseKernel("bf16 dispatched", Bf16(), Matmul));
  CheckContract(MxKernel("mxfp4 dispatched", Mx(), MatmulMxfp4));
  CheckContract(MxKernel("mxfp4 bf16-in dispatched", Mx(), MatmulMxfp4Bf16In));
}

}  // namespace
}  // namespace k3::kern::test
