// Release geometry: the REAL config.json and model.safetensors.index.json.gz against the
// published figures (docs/model.md, "Release sizes"). Expected numbers below come from
// the spec text, not from the code under test.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <set>

#include "common/tensor_names.h"

namespace k3 {
namespace {

const std::string kDir = K3_RELEASE_DATA_DIR;
const std::string kIndexPath = kDir + "/model.safetensors.index.json.gz";

std::string ShardName(int n) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "model-%05d-of-000096.safetensors", n);
  return buf;
}

class ReleaseGeometry : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!std::filesystem::exists(kDir + "/config.json")) return;
    cfg_ = std::make_unique<ModelConfig>(LoadModelConfig(kDir + "/config.json"));
  }
  // The index is ~60 MB of JSON; only the test that needs it pays for parsing it.
  static const SafetensorsIndex* Index() {
    if (!index_) index_ = std::make_unique<SafetensorsIndex>(LoadSafetensorsIndex(kIndexPath));
    return index_.get();
  }
  static void TearDownTestSuite() {
    cfg_.reset();
    index_.reset();
  }
  void SetUp() override {
    if (!cfg_) GTEST_SKIP() << "release metadata not found in " << kDir;
  }
  static std::unique_ptr<ModelConfig> cfg_;
  static std::unique_ptr<SafetensorsIndex> index_;
};
std::unique_ptr<ModelConfig> ReleaseGeometry::cfg_;
std::unique_ptr<SafetensorsIndex> ReleaseGeometry::index_;

TEST_F(ReleaseGeometry, LayerMapAndExpertSize) {
  const ModelConfig& c = *cfg_;
  EXPECT_EQ(c.num_layers, 93);
  EXPECT_EQ(c.num_kda_layers(), 69);
  EXPECT_EQ(c.num_mla_layers(), 24);
  EXPECT_EQ(c.layer_kind[91], MixerKind::MLA);
  EXPECT_EQ(c.layer_kind[92], MixerKind::MLA);
  EXPECT_EQ(c.layer_kind[0], MixerKind::KDA);
  EXPECT_EQ(c.expert_bytes(), 17547264);
  EXPECT_EQ(c.expert_bytes() % 4096, 0);  // 4284 x 4096 (docs/model.md, "Checkpoint files")
}

TEST_F(ReleaseGeometry, ExpertBytesPerToken) {
  const ModelConfig& c = *cfg_;
  const int64_t moe_layers = c.num_layers - c.first_k_dense_replace;
  EXPECT_EQ(moe_layers, 92);
  const double per_token = static_cast<double>(moe_layers * c.top_k * c.expert_bytes());
  EXPECT_NEAR(per_token / 1e9, 25.83, 0.005);  // "25.83 GB of expert bytes"
  EXPECT_NEAR(static_cast<double>(c.num_experts * c.expert_bytes()) / 1e9, 15.72, 0.005);  // one MoE layer
}

TEST_F(ReleaseGeometry, IndexMatchesTensorNames) {
  if (!std::filesystem::exists(kIndexPath)) GTEST_SKIP() << "release index not found: " << kIndexPath;
  const ModelConfig& c = *cfg_;
  const auto& wm = Index()->weight_map;
  EXPECT_EQ(wm.size(), 497220u);
  EXPECT_EQ(Index()->total_size, 1560860324864LL);

  std::set<std::string> produced;
  size_t trunk = 0, experts = 0;
  auto expect_in = [&](const std::string& name, const std::string& shard) {
    produced.insert(name);
    auto it = wm.find(name);
    if (it == wm.end()) {
      ADD_FAILURE() << "not in the index: " << name;
      return;
    }
    EXPECT_EQ(it->second, shard) << name;
  };
  for (int l = 0; l < c.num_layers; ++l) {
    const std::string shard = ShardName(l + 1);  // layer L lives in shard L+1
    for (const std::string& n : LayerTrunkNames(c, l)) {
      expect_in(n, shard);
      ++trunk;
    }
    if (c.is_dense(l)) continue;
    for (int e = 0; e < c.num_experts; ++e)
      for (const std::string& n : ExpertTensorNames(l, e)) {
        expect_in(n, shard);
        ++experts;
      }
  }
  for (ModelRole r : {ModelRole::kEmbedTokens, ModelRole::kLmHead, ModelRole::kNorm, ModelRole::kOutputAttnResNorm,
                      ModelRole::kOutputAttnResProj}) {
    expect_in(ModelTensorName(r), ShardName(94));
    ++trunk;
  }
  EXPECT_EQ(trunk, 2460u);
  EXPECT_EQ(experts, 82432u * 6);
  EXPECT_EQ(produced.size(), trunk + experts);  // no name produced twice

  // Conversely every text tensor in the index is one tensor_names produces; the rest is vision.
  size_t text = 0, other = 0;
  for (const auto& [name, shard] : wm) {
    if (name.rfind("language_model.", 0) == 0) {
      ++text;
      EXPECT_TRUE(produced.count(name)) << "index tensor not produced by tensor_names: " << name;
    } else {
      ++other;
    }
  }
  EXPECT_EQ(text, 2460u + 494592u);
  EXPECT_EQ(other, 168u);
}

TEST_F(ReleaseGeometry, TrunkBytesFromConfigAndReleaseDTypes) {
  const ModelConfig& c = *cfg_;
  int64_t largest = 0, largest_layer = -1, total = 0;
  for (int l = 0; l < c.num_layers; ++l) {
    const int64_t b = LayerTrunkBytes(c, l);
    total += b;
    if (b > largest) {
      largest = b;
      largest_layer = l;
    }
  }
  EXPECT_EQ(largest_layer, 0);
  EXPECT_NEAR(static_cast<double>(largest) / 1e9, 2.341, 0.0005);  // "2.341 GB (layer 0, dense)"
  EXPECT_NEAR(static_cast<double>(total) / 1e9, 108.81, 0.005);    // per-layer trunk total ("Release sizes")

  // Published shard file sizes (docs/model.md, "Release sizes") = 8 + header + tensor bytes. Headers are
  // JSON text of at most ~1 MB here, so the remainder must be positive and small.
  const int64_t experts = c.num_experts * c.expert_bytes();
  auto header_of = [](int64_t shard_size, int64_t tensor_bytes) { return shard_size - 8 - tensor_bytes; };
  const int64_t h0 = header_of(2341216112LL, LayerTrunkBytes(c, 0));         // shard 1: KDA + dense
  const int64_t h1 = header_of(16990911504LL, LayerTrunkBytes(c, 1) + experts);  // KDA + MoE, 1-digit layer
  const int64_t h3 = header_of(16567501776LL, LayerTrunkBytes(c, 3) + experts);  // MLA + MoE, 1-digit layer
  int64_t model_bytes = 0;
  for (ModelRole r : {ModelRole::kEmbedTokens, ModelRole::kLmHead, ModelRole::kNorm, ModelRole::kOutputAttnResNorm,
                      ModelRole::kOutputAttnResProj}) {
    int64_t n = DTypeSize(ReleaseDType(r));
    for (int64_t d : ExpectedShape(c, r)) n *= d;
    model_bytes += n;
  }
  const int64_t h94 = header_of(4697664072LL, model_bytes);
  for (int64_t h : {h0, h1, h3, h94}) {
    EXPECT_GT(h, 0);
    EXPECT_EQ(h % 8, 0);  // headers are padded to 8 bytes
  }
  EXPECT_LT(h0, 8192);
  EXPECT_LT(h94, 8192);
  EXPECT_LT(h1, 1 << 20);
  EXPECT_LT(h3, 1 << 20);
  // Layers 1 and 3 carry the same 5,376 expert entries; their headers differ only by the
  // trunk entries (20 vs 14 tensors), so the KDA header is the longer one.
  EXPECT_GT(h1, h3);
}

}  // namespace
}  // namespace k3
