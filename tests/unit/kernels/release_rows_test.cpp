// Real bytes from the released checkpoint (layers.1 expert 0 w1, 64 rows x 3584): decoding must
// reproduce the published values exactly, with the low nibble as the even element.
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>

#include "kernel_test_util.h"

namespace k3::kern::test {
namespace {

class ReleaseRows : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::filesystem::path path =
        std::filesystem::path(K3_RELEASE_DATA_DIR) / "mxfp4-layer1-expert0-w1-rows.json";
    std::ifstream in(path);
    if (!in) GTEST_SKIP() << "release data not found: " << path;
    const auto j = nlohmann::json::parse(in);
    rows_ = j.at("rows").get<int64_t>();
    cols_ = j.at("logical_width").get<int64_t>();
    ASSERT_EQ(j.at("group_size").get<int64_t>(), 32);
    packed_ = j.at("packed").at("data").get<std::vector<uint8_t>>();
    scales_ = j.at("scales").at("data").get<std::vector<uint8_t>>();
    expected_ = j.at("expected").at("data").get<std::vector<double>>();
    swapped_first64_ = j.at("expected_swapped_nibbles").at("first64").get<std::vector<double>>();
    ASSERT_EQ(static_cast<int64_t>(packed_.size()), rows_ * cols_ / 2);
    ASSERT_EQ(static_cast<int64_t>(scales_.size()), rows_ * cols_ / 32);
    ASSERT_EQ(static_cast<int64_t>(expected_.size()), rows_ * cols_);
    ASSERT_EQ(swapped_first64_.size(), 64u);
  }
  Mxfp4Mat Mat() const { return {packed_.data(), scales_.data(), rows_, cols_, 32}; }

  int64_t rows_ = 0, cols_ = 0;
  std::vector<uint8_t> packed_, scales_;
  std::vector<double> expected_, swapped_first64_;
};

TEST_F(ReleaseRows, DecodeEqualsPublishedValues) {
  std::vector<float> row(cols_);
  int64_t mismatches = 0;
  for (int64_t r = 0; r < rows_; ++r) {
    Mxfp4RowToFloat(Mat(), r, row.data());
    for (int64_t k = 0; k < cols_; ++k) {
      const double want = expected_[r * cols_ + k];
      if (static_cast<double>(row[k]) != want || std::signbit(row[k]) != std::signbit(want)) {
        if (++mismatches <= 5) ADD_FAILURE() << "row " << r << " col " << k << ": " << row[k] << " != " << want;
      }
    }
  }
  EXPECT_EQ(mismatches, 0);
}

TEST_F(ReleaseRows, SwappedNibblesAreWrong) {
  std::vector<float> row(cols_);
  Mxfp4RowToFloat(Mat(), 0, row.data());
  int differ = 0;
  for (int k = 0; k < 64; ++k) differ += static_cast<double>(row[k]) != swapped_first64_[k];
  EXPECT_GT(differ, 16) << "decoder output looks like the swapped-nibble decode";
  // The published swapped decode is ours with each pair exchanged (checks the file's meaning).
  for (int k = 0; k < 64; ++k) EXPECT_EQ(static_cast<double>(row[k ^ 1]), swapped_first64_[k]) << k;
}

TEST_F(ReleaseRows, MatvecMatchesDoubleFromPublishedValues) {
  std::vector<std::vector<double>> w(rows_, std::vector<double>(cols_));
  for (int64_t r = 0; r < rows_; ++r) {
    for (int64_t k = 0; k < cols_; ++k) w[r][k] = expected_[r * cols_ + k];
  }
  const int64_t T = 3;
  const auto x = RandomFloats(static_cast<size_t>(T * cols_), 314);
  std::vector<float> y(T * rows_);
  MatmulMxfp4Scalar(Mat(), x.data(), T, y.data());
  ExpectNearRef(w, x.data(), T, y.data(), 1e-5, "release rows scalar");
  if (CpuHasAvx2Fma()) {
    MatmulMxfp4Avx2(Mat(), x.data(), T, y.data());
    ExpectNearRef(w, x.data(), T, y.data(), 1e-5, "release rows avx2");
  }
}

}  // namespace
}  // namespace k3::kern::test
