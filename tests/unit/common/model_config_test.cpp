// config.json: the real release file must load with the published values; each refusal test
// mutates ONE field of it and checks the error names that field.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "common/model_config.h"
#include "test_util.h"

namespace k3 {
namespace {

using nlohmann::json;
using test::ExpectBadModel;

const std::string kConfigPath = std::string(K3_RELEASE_DATA_DIR) + "/config.json";

class ModelConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(kConfigPath)) GTEST_SKIP() << "release config not found at " << kConfigPath;
    cfg_ = json::parse(test::ReadBytes(kConfigPath));
  }
  json& tc() { return cfg_["text_config"]; }
  json& lac() { return cfg_["text_config"]["linear_attn_config"]; }
  json& quant() { return cfg_["text_config"]["quantization_config"]; }
  ModelConfig Parse() { return ParseModelConfig(cfg_.dump(), "cfg.json"); }
  void ExpectRefused(const std::vector<std::string>& needles) {
    std::vector<std::string> n = {"cfg.json"};
    n.insert(n.end(), needles.begin(), needles.end());
    ExpectBadModel([&] { Parse(); }, n);
  }
  json cfg_;
};

TEST_F(ModelConfigTest, RealConfigLoads) {
  const ModelConfig c = LoadModelConfig(kConfigPath);
  EXPECT_EQ(c.hidden_size, 7168);
  EXPECT_EQ(c.num_layers, 93);
  EXPECT_EQ(c.vocab_size, 163840);
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-5);
  EXPECT_DOUBLE_EQ(c.situ_beta, 4.0);
  EXPECT_DOUBLE_EQ(c.situ_linear_beta, 25.0);
  EXPECT_TRUE(c.situ_linear_capped);
  EXPECT_EQ(c.intermediate_size, 33792);
  EXPECT_EQ(c.first_k_dense_replace, 1);
  EXPECT_EQ(c.attn_res_block_size, 12);
  EXPECT_EQ(c.mla_heads, 96);
  EXPECT_EQ(c.q_lora_rank, 1536);
  EXPECT_EQ(c.kv_lora_rank, 512);
  EXPECT_EQ(c.qk_nope_head_dim, 128);
  EXPECT_EQ(c.qk_rope_head_dim, 64);
  EXPECT_EQ(c.v_head_dim, 128);
  EXPECT_EQ(c.kda_heads, 96);
  EXPECT_EQ(c.kda_head_dim, 128);
  EXPECT_EQ(c.kda_proj(), 12288);
  EXPECT_EQ(c.conv_kernel, 4);
  EXPECT_DOUBLE_EQ(c.gate_lower_bound, -5.0);
  EXPECT_EQ(c.num_experts, 896);
  EXPECT_EQ(c.top_k, 16);
  EXPECT_EQ(c.num_shared_experts, 2);
  EXPECT_EQ(c.shared_width(), 6144);
  EXPECT_EQ(c.moe_intermediate_size, 3072);
  EXPECT_EQ(c.latent_size, 3584);
  EXPECT_TRUE(c.moe_renormalize);
  EXPECT_DOUBLE_EQ(c.routed_scaling_factor, 1.0);
  EXPECT_EQ(c.mxfp4_group, 32);
  EXPECT_EQ(c.bos_token_id, 163584);
  EXPECT_EQ(c.eos_token_id, 163586);
  EXPECT_EQ(c.pad_token_id, 163839);
  ASSERT_EQ(c.layer_kind.size(), 93u);
  // 0-based MLA layers are 3,7,...,91 and 92 (one-based full_attn_layers 4,8,...,92,93).
  for (int l = 0; l < 93; ++l) {
    const bool mla = (l % 4 == 3) || l == 92;
    EXPECT_EQ(c.layer_kind[l], mla ? MixerKind::MLA : MixerKind::KDA) << "layer " << l;
  }
}

TEST_F(ModelConfigTest, EosTokenIdIsOneIdOrAList) {
  EXPECT_EQ(Parse().eos_token_ids, (std::vector<int64_t>{163586}));
  cfg_["eos_token_id"] = json::array({163585, 163586});
  const ModelConfig c = Parse();
  EXPECT_EQ(c.eos_token_ids, (std::vector<int64_t>{163585, 163586}));
  EXPECT_EQ(c.eos_token_id, 163585);
  cfg_["eos_token_id"] = json::array({163585, 163840});
  ExpectRefused({"eos_token_id", "163840"});
  cfg_["eos_token_id"] = json::array({163585, "x"});
  ExpectRefused({"eos_token_id"});
  cfg_["eos_token_id"] = nullptr;
  cfg_["text_config"]["eos_token_id"] = nullptr;
  EXPECT_TRUE(Parse().eos_token_ids.empty());
}

TEST_F(ModelConfigTest, FlatTextConfigLoadsTheSame) {
  const ModelConfig nested = Parse();
  json flat = tc();
  const ModelConfig f = ParseModelConfig(flat.dump(), "flat.json");
  EXPECT_EQ(f.hidden_size, nested.hidden_size);
  EXPECT_EQ(f.layer_kind, nested.layer_kind);
  EXPECT_EQ(f.eos_token_id, nested.eos_token_id);
  EXPECT_EQ(f.expert_bytes(), nested.expert_bytes());
}

TEST_F(ModelConfigTest, DocumentedDefaultsForOptionalFields) {
  tc().erase("activation_situ_linear_beta");
  tc().erase("activation_situ_beta");
  tc().erase("routed_scaling_factor");
  tc().erase("moe_renormalize");
  const ModelConfig c = Parse();
  EXPECT_FALSE(c.situ_linear_capped);
  EXPECT_DOUBLE_EQ(c.situ_beta, 1.0);
  EXPECT_DOUBLE_EQ(c.routed_scaling_factor, 1.0);
  EXPECT_TRUE(c.moe_renormalize);
}

TEST_F(ModelConfigTest, RefusesHiddenAct) {
  tc()["hidden_act"] = "silu";
  ExpectRefused({"text_config.hidden_act", "silu"});
}

TEST_F(ModelConfigTest, RefusesRouterActivation) {
  tc()["moe_router_activation_func"] = "softmax";
  ExpectRefused({"text_config.moe_router_activation_func"});
}

TEST_F(ModelConfigTest, RefusesGroupedTopk) {
  tc()["num_expert_group"] = 2;
  ExpectRefused({"text_config.num_expert_group"});
  tc()["num_expert_group"] = 1;
  tc()["topk_group"] = 4;
  ExpectRefused({"text_config.topk_group"});
}

TEST_F(ModelConfigTest, RefusesQuantFormat) {
  quant()["format"] = "nvfp4-pack-quantized";
  ExpectRefused({"text_config.quantization_config.format"});
}

TEST_F(ModelConfigTest, RefusesQuantGroupSize) {
  quant()["config_groups"]["group_0"]["weights"]["group_size"] = 16;
  ExpectRefused({"quantization_config.config_groups.group_0.weights.group_size"});
}

TEST_F(ModelConfigTest, RefusesMissingQuantization) {
  tc().erase("quantization_config");
  ExpectRefused({"text_config.quantization_config", "MXFP4"});
}

TEST_F(ModelConfigTest, RefusesLayerIndexOutOfRange) {
  lac()["kda_layers"].push_back(999);
  ExpectRefused({"text_config.linear_attn_config.kda_layers", "999"});
  lac()["kda_layers"].erase(lac()["kda_layers"].size() - 1);
  lac()["full_attn_layers"][0] = 0;  // lists are one-based
  ExpectRefused({"full_attn_layers", "layer 0"});
}

TEST_F(ModelConfigTest, RefusesDuplicateOverlappingOrMissingLayers) {
  json saved = lac();
  lac()["kda_layers"].push_back(1);
  ExpectRefused({"kda_layers", "listed twice"});
  lac() = saved;
  lac()["full_attn_layers"].push_back(1);
  ExpectRefused({"full_attn_layers", "both"});
  lac() = saved;
  lac()["full_attn_layers"].erase(lac()["full_attn_layers"].size() - 1);  // drops 93
  ExpectRefused({"layer 93", "neither"});
}

TEST_F(ModelConfigTest, RefusesTopKOutOfRange) {
  tc()["num_experts_per_token"] = 1000;
  ExpectRefused({"text_config.num_experts_per_token", "1000"});
  tc()["num_experts_per_token"] = 0;
  ExpectRefused({"text_config.num_experts_per_token"});
}

TEST_F(ModelConfigTest, RefusesMissingKvLoraRank) {
  tc().erase("kv_lora_rank");
  ExpectRefused({"text_config.kv_lora_rank", "missing"});
}

TEST_F(ModelConfigTest, RefusesMissingLinearAttnConfig) {
  tc().erase("linear_attn_config");
  ExpectRefused({"text_config.linear_attn_config", "missing"});
}

TEST_F(ModelConfigTest, RefusesTiedEmbeddings) {
  tc()["tie_word_embeddings"] = true;
  ExpectRefused({"text_config.tie_word_embeddings"});
  tc()["tie_word_embeddings"] = false;
  cfg_["tie_word_embeddings"] = true;
  ExpectRefused({"tie_word_embeddings", "not implemented"});
}

TEST_F(ModelConfigTest, RefusesOtherUnsupportedFields) {
  const json saved = cfg_;
  struct Case {
    std::function<void()> mutate;
    std::string field;
  };
  const std::vector<Case> cases = {
      {[&] { tc()["num_key_value_heads"] = 48; }, "text_config.num_key_value_heads"},
      {[&] { tc()["mla_use_nope"] = false; }, "text_config.mla_use_nope"},
      {[&] { tc()["num_nextn_predict_layers"] = 1; }, "text_config.num_nextn_predict_layers"},
      {[&] { lac()["short_conv_kernel_size"] = 0; }, "linear_attn_config.short_conv_kernel_size"},
      {[&] { tc()["hidden_size"] = -7168; }, "text_config.hidden_size"},
      {[&] { tc()["hidden_size"] = 7168.5; }, "text_config.hidden_size"},
      {[&] { tc()["num_hidden_layers"] = "93"; }, "text_config.num_hidden_layers"},
      {[&] { tc()["routed_expert_hidden_size"] = 3583; }, "text_config.routed_expert_hidden_size"},
      {[&] { tc()["moe_intermediate_size"] = 3000; }, "text_config.moe_intermediate_size"},
      {[&] { tc()["rms_norm_eps"] = 0; }, "text_config.rms_norm_eps"},
      {[&] { lac()["num_heads"] = 0; }, "linear_attn_config.num_heads"},
      {[&] { lac()["head_dim"] = 1 << 30; }, "linear_attn_config.head_dim"},
      {[&] { tc()["moe_layer_freq"] = 2; }, "text_config.moe_layer_freq"},
      {[&] { tc()["hidden_size"] = int64_t{1} << 40; }, "text_config.hidden_size"},
      {[&] { tc()["vocab_size"] = int64_t{1} << 40; }, "text_config.vocab_size"},
      {[&] { tc()["num_shared_experts"] = -1; }, "text_config.num_shared_experts"},
      {[&] { lac()["gate_lower_bound"] = 0.0; }, "linear_attn_config.gate_lower_bound"},
      {[&] { lac()["use_full_rank_gate"] = false; }, "linear_attn_config.use_full_rank_gate"},
      {[&] { tc()["latent_moe_use_norm"] = false; }, "text_config.latent_moe_use_norm"},
      {[&] { tc()["topk_method"] = "greedy"; }, "text_config.topk_method"},
      {[&] { tc()["mla_use_output_gate"] = false; }, "text_config.mla_use_output_gate"},
      {[&] { tc()["activation_situ_linear_beta"] = -1.0; }, "text_config.activation_situ_linear_beta"},
      {[&] { tc()["first_k_dense_replace"] = 94; }, "text_config.first_k_dense_replace"},
      {[&] { tc().erase("intermediate_size"); }, "text_config.intermediate_size"},
      {[&] { quant()["quant_method"] = "gptq"; }, "quantization_config.quant_method"},
      {[&] { quant()["config_groups"]["group_0"]["weights"]["num_bits"] = 8; }, "weights.num_bits"},
      {[&] { quant()["config_groups"]["group_0"]["weights"]["symmetric"] = false; }, "weights.symmetric"},
      {[&] { quant()["config_groups"]["group_0"]["weights"]["type"] = "int"; }, "weights.type"},
      {[&] { cfg_["eos_token_id"] = 163840; }, "eos_token_id"},
      {[&] { tc()["activation_situ_beta"] = 0; }, "text_config.activation_situ_beta"},
  };
  for (const Case& c : cases) {
    cfg_ = saved;
    c.mutate();
    SCOPED_TRACE(c.field);
    ExpectRefused({c.field});
  }
}

TEST(ModelConfigText, RejectsBadJson) {
  ExpectBadModel([] { ParseModelConfig("{\"text_config\":{\"a\":1,\"a\":2}}", "dup.json"); }, {"dup.json", "duplicate", "\"a\""});
  ExpectBadModel([] { ParseModelConfig("{", "trunc.json"); }, {"trunc.json", "invalid JSON"});
  ExpectBadModel([] { ParseModelConfig("[]", "arr.json"); }, {"arr.json", "not a JSON object"});
  ExpectBadModel([] { ParseModelConfig("{\"text_config\":3}", "t.json"); }, {"t.json", "text_config"});
  ExpectBadModel([] { LoadModelConfig("/nonexistent/config.json"); }, {"/nonexistent/config.json"});
}

}  // namespace
}  // namespace k3
