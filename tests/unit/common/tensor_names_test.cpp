// Tensor names and byte ranges: spellings from docs/model.md "Tensor names", ranges over hand-made
// shards (dtype-then-name order, as released) and over the project's checkpoint generator.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <set>

#include "common/tensor_names.h"
#include "test_util.h"

namespace k3 {
namespace {

using test::ExpectBadModel;

// A small flat (text_config-only) config: layers 0,1 KDA (0 dense), layer 2 MLA.
const char* kTinyConfig = R"({
  "hidden_size": 64, "num_hidden_layers": 3, "vocab_size": 32, "rms_norm_eps": 1e-5,
  "hidden_act": "situ", "activation_situ_beta": 4.0, "activation_situ_linear_beta": 25.0,
  "intermediate_size": 96, "first_k_dense_replace": 1, "attn_res_block_size": 2,
  "num_attention_heads": 2, "num_key_value_heads": 2, "q_lora_rank": 32, "kv_lora_rank": 32,
  "qk_nope_head_dim": 16, "qk_rope_head_dim": 8, "v_head_dim": 16,
  "mla_use_nope": true, "mla_use_output_gate": true,
  "linear_attn_config": {"num_heads": 2, "head_dim": 32, "short_conv_kernel_size": 4,
    "gate_lower_bound": -5.0, "use_full_rank_gate": true,
    "kda_layers": [1, 2], "full_attn_layers": [3]},
  "num_experts": 4, "num_experts_per_token": 2, "num_shared_experts": 1,
  "moe_intermediate_size": 32, "routed_expert_hidden_size": 64, "latent_moe_use_norm": true,
  "moe_router_activation_func": "sigmoid", "use_grouped_topk": false,
  "quantization_config": {"quant_method": "compressed-tensors", "format": "mxfp4-pack-quantized",
    "config_groups": {"group_0": {"format": "mxfp4-pack-quantized", "input_activations": null,
      "weights": {"num_bits": 4, "type": "float", "strategy": "group", "group_size": 32,
                  "symmetric": true, "dynamic": false}}}}
})";

TEST(TensorNames, SpellingsFromTheSpec) {
  EXPECT_EQ(LayerTensorName(0, TensorRole::kInputLayernorm), "language_model.model.layers.0.input_layernorm.weight");
  EXPECT_EQ(LayerTensorName(12, TensorRole::kSelfAttentionResProj),
            "language_model.model.layers.12.self_attention_res_proj.weight");
  EXPECT_EQ(LayerTensorName(5, TensorRole::kKdaALog), "language_model.model.layers.5.self_attn.A_log");
  EXPECT_EQ(LayerTensorName(5, TensorRole::kKdaDtBias), "language_model.model.layers.5.self_attn.dt_bias");
  EXPECT_EQ(LayerTensorName(5, TensorRole::kKdaQConv1d), "language_model.model.layers.5.self_attn.q_conv1d.weight");
  EXPECT_EQ(LayerTensorName(3, TensorRole::kMlaKvAProjWithMqa),
            "language_model.model.layers.3.self_attn.kv_a_proj_with_mqa.weight");
  EXPECT_EQ(LayerTensorName(0, TensorRole::kDenseDownProj), "language_model.model.layers.0.mlp.down_proj.weight");
  EXPECT_EQ(LayerTensorName(7, TensorRole::kMoeGateBias),
            "language_model.model.layers.7.block_sparse_moe.gate.e_score_correction_bias");
  EXPECT_EQ(LayerTensorName(7, TensorRole::kSharedUpProj),
            "language_model.model.layers.7.block_sparse_moe.shared_experts.up_proj.weight");
  EXPECT_EQ(LayerTensorName(7, TensorRole::kMoeLatentNorm),
            "language_model.model.layers.7.block_sparse_moe.routed_expert_norm.weight");
  EXPECT_EQ(ExpertTensorName(1, 0, ExpertProj::kW1, false),
            "language_model.model.layers.1.block_sparse_moe.experts.0.w1.weight_packed");
  EXPECT_EQ(ExpertTensorName(92, 895, ExpertProj::kW2, true),
            "language_model.model.layers.92.block_sparse_moe.experts.895.w2.weight_scale");
  EXPECT_EQ(ModelTensorName(ModelRole::kLmHead), "language_model.lm_head.weight");
  EXPECT_EQ(ModelTensorName(ModelRole::kEmbedTokens), "language_model.model.embed_tokens.weight");
  EXPECT_EQ(ModelTensorName(ModelRole::kOutputAttnResProj), "language_model.model.output_attn_res_proj.weight");
}

TEST(TensorNames, TrunkListsByLayerKind) {
  const ModelConfig c = ParseModelConfig(kTinyConfig, "tiny.json");
  // KDA 6+14, dense 3; KDA + MoE 8 (5 + 3 shared); MLA 6+8 + MoE 8.
  EXPECT_EQ(LayerTrunkNames(c, 0).size(), 23u);
  EXPECT_EQ(LayerTrunkNames(c, 1).size(), 28u);
  EXPECT_EQ(LayerTrunkNames(c, 2).size(), 22u);
  const auto n2 = LayerTrunkNames(c, 2);
  EXPECT_NE(std::find(n2.begin(), n2.end(), "language_model.model.layers.2.self_attn.q_b_proj.weight"), n2.end());
  EXPECT_EQ(std::find(n2.begin(), n2.end(), "language_model.model.layers.2.self_attn.q_proj.weight"), n2.end());
  EXPECT_EQ(ExpectedShape(c, TensorRole::kMlaQBProj), (std::vector<int64_t>{2 * 24, 32}));
  EXPECT_EQ(ExpectedShape(c, TensorRole::kMlaKvBProj), (std::vector<int64_t>{2 * 32, 32}));
  EXPECT_EQ(ExpectedShape(c, TensorRole::kKdaQConv1d), (std::vector<int64_t>{64, 1, 4}));
  EXPECT_EQ(ExpectedShape(c, TensorRole::kKdaALog), (std::vector<int64_t>{32}));
  EXPECT_EQ(ExpectedExpertShape(c, ExpertProj::kW1, false), (std::vector<int64_t>{32, 32}));
  EXPECT_EQ(ExpectedExpertShape(c, ExpertProj::kW2, true), (std::vector<int64_t>{64, 1}));
  // w1,w3: 32x64 -> 1024 packed + 64 scale each; w2: 64x32 -> 1024 + 64.
  EXPECT_EQ(c.expert_bytes(), 3 * (1024 + 64));
}

// Writes one shard for `layer` in released order: F32 trunk, BF16 trunk, then U8 experts,
// each group sorted by name. Returns its tensor list (name, dtype, shape).
std::vector<test::Tensor> LayerTensors(const ModelConfig& c, int layer) {
  std::vector<test::Tensor> f32, bf16, u8;
  for (TensorRole r : LayerTrunkRoles(c, layer)) {
    const bool is_f32 = ReleaseDType(r) == DType::F32;
    (is_f32 ? f32 : bf16).push_back({LayerTensorName(layer, r), is_f32 ? "F32" : "BF16", ExpectedShape(c, r)});
  }
  if (!c.is_dense(layer)) {
    for (int e = 0; e < c.num_experts; ++e)
      for (ExpertProj w : {ExpertProj::kW1, ExpertProj::kW2, ExpertProj::kW3})
        for (bool s : {false, true}) u8.push_back({ExpertTensorName(layer, e, w, s), "U8", ExpectedExpertShape(c, w, s)});
  }
  auto by_name = [](const test::Tensor& a, const test::Tensor& b) { return a.name < b.name; };
  std::sort(f32.begin(), f32.end(), by_name);
  std::sort(bf16.begin(), bf16.end(), by_name);
  std::sort(u8.begin(), u8.end(), by_name);
  std::vector<test::Tensor> all = f32;
  all.insert(all.end(), bf16.begin(), bf16.end());
  all.insert(all.end(), u8.begin(), u8.end());
  return all;
}

std::string IndexFor(const std::vector<std::pair<std::string, std::string>>& entries) {
  std::string s = "{\"weight_map\":{";
  for (size_t i = 0; i < entries.size(); ++i) {
    if (i) s += ',';
    s += "\"" + entries[i].first + "\":\"" + entries[i].second + "\"";
  }
  return s + "}}";
}

TEST(TensorRanges, HandMadeShards) {
  const ModelConfig c = ParseModelConfig(kTinyConfig, "tiny.json");
  test::TempDir dir;
  std::vector<std::pair<std::string, std::string>> index;
  std::vector<int64_t> trunk_bytes(3, 0);
  for (int l = 0; l < 3; ++l) {
    const std::string shard = "model-0000" + std::to_string(l + 1) + "-of-000003.safetensors";
    const auto ts = LayerTensors(c, l);
    int64_t n = 0;
    {
      const std::string hdr = test::HeaderJson(test::Pack(ts, &n));
      test::WriteFile(dir / shard, hdr, n);
    }
    for (const auto& t : ts) {
      index.push_back({t.name, shard});
      if (t.dtype != "U8") {
        int64_t b = test::DSize(t.dtype);
        for (int64_t d : t.shape) b *= d;
        trunk_bytes[l] += b;
      }
    }
  }
  test::WriteBytes(dir / "model.safetensors.index.json", IndexFor(index));
  const Checkpoint ck = Checkpoint::Open(dir.path());
  for (int l = 0; l < 3; ++l) {
    SCOPED_TRACE(l);
    const ByteRange r = LayerTrunkRange(ck, c, l);
    EXPECT_EQ(r.shard, l);
    // The trunk is the front of the data section, and nothing else is inside it.
    const std::string shard_path = ck.shard_paths()[l];
    EXPECT_EQ(r.begin, SafetensorsFile::Open(shard_path).data_start());
    EXPECT_EQ(r.end - r.begin, trunk_bytes[l]);
    EXPECT_TRUE(r.contiguous());
    EXPECT_EQ(LayerTrunkBytes(c, l), trunk_bytes[l]);
  }
  // Experts follow the trunk, in name order (0,1,2,3 here), each one contiguous run.
  int64_t prev_end = LayerTrunkRange(ck, c, 1).end;
  for (int e = 0; e < 4; ++e) {
    const ByteRange r = ExpertRange(ck, 1, e);
    EXPECT_EQ(r.end - r.begin, c.expert_bytes());
    EXPECT_EQ(r.begin, prev_end);
    prev_end = r.end;
  }
  ExpectBadModel([&] { ExpertRange(ck, 1, 4); }, {dir.path(), "experts.4"});
  // No model-level tensors were written.
  ExpectBadModel([&] { ValidateCheckpoint(ck, c); }, {dir.path(), "embed_tokens", "missing"});
}

TEST(TensorRanges, ValidateCheckpointShapeAndDType) {
  const ModelConfig c = ParseModelConfig(kTinyConfig, "tiny.json");
  auto write_and_validate = [&](const std::string& bad_name, const std::string& dtype, std::vector<int64_t> shape,
                                const std::vector<std::string>& needles) {
    test::TempDir dir;
    std::vector<test::Tensor> ts;
    for (int l = 0; l < 3; ++l) {
      auto lt = LayerTensors(c, l);
      ts.insert(ts.end(), lt.begin(), lt.end());
    }
    for (ModelRole r : {ModelRole::kEmbedTokens, ModelRole::kLmHead, ModelRole::kNorm, ModelRole::kOutputAttnResNorm,
                        ModelRole::kOutputAttnResProj})
      ts.push_back({ModelTensorName(r), "BF16", ExpectedShape(c, r)});
    for (auto& t : ts)
      if (t.name == bad_name) {
        t.dtype = dtype;
        t.shape = shape;
      }
    int64_t n = 0;
    const std::string hdr = test::HeaderJson(test::Pack(ts, &n));
    test::WriteFile(dir / "model.safetensors", hdr, n);
    const Checkpoint ck = Checkpoint::Open(dir.path());
    if (needles.empty()) {
      EXPECT_NO_THROW(ValidateCheckpoint(ck, c));
    } else {
      std::vector<std::string> all = {dir.path(), bad_name};
      all.insert(all.end(), needles.begin(), needles.end());
      ExpectBadModel([&] { ValidateCheckpoint(ck, c); }, all);
    }
  };
  // Control: everything as released; A_log unpadded ([heads]) and F32 norms are accepted too.
  write_and_validate(LayerTensorName(1, TensorRole::kKdaALog), "F32", {2}, {});
  write_and_validate(LayerTensorName(1, TensorRole::kInputLayernorm), "F32", {64}, {});
  write_and_validate(LayerTensorName(2, TensorRole::kMlaKvBProj), "BF16", {64, 31}, {"shape [64,31]", "[64,32]"});
  write_and_validate(LayerTensorName(1, TensorRole::kKdaALog), "F32", {3}, {"shape [3]"});
  write_and_validate(ExpertTensorName(1, 3, ExpertProj::kW3, true), "F32", {32, 2}, {"dtype F32", "U8"});
  write_and_validate(ModelTensorName(ModelRole::kLmHead), "I32", {32, 64}, {"dtype I32"});
}

TEST(TensorRanges, NonContiguousExpertAndSplitTrunk) {
  const ModelConfig c = ParseModelConfig(kTinyConfig, "tiny.json");
  test::TempDir dir;
  auto ts = LayerTensors(c, 1);
  // Move expert 0's w2.weight_scale to the very end: expert 0 is no longer one run.
  const std::string moved = ExpertTensorName(1, 0, ExpertProj::kW2, true);
  auto it = std::find_if(ts.begin(), ts.end(), [&](const test::Tensor& t) { return t.name == moved; });
  ASSERT_NE(it, ts.end());
  test::Tensor t = *it;
  ts.erase(it);
  ts.push_back(t);
  // And put one trunk tensor of layer 1 into a second shard.
  const std::string split = LayerTensorName(1, TensorRole::kMoeGate);
  auto gate = std::find_if(ts.begin(), ts.end(), [&](const test::Tensor& x) { return x.name == split; });
  ASSERT_NE(gate, ts.end());
  const test::Tensor g = *gate;
  ts.erase(gate);
  int64_t n = 0, n2 = 0;
  {
    const std::string hdr = test::HeaderJson(test::Pack(ts, &n));
    test::WriteFile(dir / "a.safetensors", hdr, n);
  }
  {
    const std::string hdr = test::HeaderJson(test::Pack({g}, &n2));
    test::WriteFile(dir / "b.safetensors", hdr, n2);
  }
  std::vector<std::pair<std::string, std::string>> index;
  for (const auto& x : ts) index.push_back({x.name, "a.safetensors"});
  index.push_back({g.name, "b.safetensors"});
  test::WriteBytes(dir / "model.safetensors.index.json", IndexFor(index));
  const Checkpoint ck = Checkpoint::Open(dir.path());
  ExpectBadModel([&] { ExpertRange(ck, 1, 0); }, {dir.path(), "layer 1 expert 0", "not contiguous"});
  EXPECT_EQ(ExpertRange(ck, 1, 1).end - ExpertRange(ck, 1, 1).begin, c.expert_bytes());
  ExpectBadModel([&] { LayerTrunkRange(ck, c, 1); }, {dir.path(), "layer 1 trunk", "split across shards"});
}

// The globals run: [min, max) of the model-level tensors it holds; the streamed embedding or
// lm_head leave it, and all five must share one shard.
TEST(TensorRanges, GlobalsRun) {
  test::TempDir dir;
  // File order: embed, norm, attn-res norm, lm_head, attn-res proj (12, 8, 4, 20, 16 bytes).
  const std::vector<test::Tensor> ts = {{ModelTensorName(ModelRole::kEmbedTokens), "F32", {3}},
                                        {ModelTensorName(ModelRole::kNorm), "F32", {2}},
                                        {ModelTensorName(ModelRole::kOutputAttnResNorm), "F32", {1}},
                                        {ModelTensorName(ModelRole::kLmHead), "F32", {5}},
                                        {ModelTensorName(ModelRole::kOutputAttnResProj), "F32", {4}}};
  int64_t n = 0;
  const std::string hdr = test::HeaderJson(test::Pack(ts, &n));
  test::WriteFile(dir / "model.safetensors", hdr, n);
  const Checkpoint ck = Checkpoint::Open(dir.path());
  const int64_t base = ck.at(ts[0].name).file_offset;
  const ByteRange all = GlobalsRange(ck);
  EXPECT_EQ(all.begin, base);
  EXPECT_EQ(all.end, base + 60);
  EXPECT_TRUE(all.contiguous());
  const ByteRange no_embed = GlobalsRange(ck, {false, true});
  EXPECT_EQ(no_embed.begin, base + 12);
  EXPECT_EQ(no_embed.end, base + 60);
  const ByteRange neither = GlobalsRange(ck, {false, false});
  EXPECT_EQ(neither.begin, base + 12);
  EXPECT_EQ(neither.end, base + 60);
  EXPECT_EQ(neither.tensor_bytes, 28);  // norm + both attn-res tensors; lm_head's bytes lie inside
  EXPECT_FALSE(neither.contiguous());

  // The embedding in another shard: refused even when it is streamed.
  test::TempDir split;
  int64_t n1 = 0, n2 = 0;
  const std::vector<test::Tensor> rest(ts.begin() + 1, ts.end()), embed{ts[0]};
  const std::string hdr_a = test::HeaderJson(test::Pack(rest, &n1));
  test::WriteFile(split / "a.safetensors", hdr_a, n1);
  const std::string hdr_b = test::HeaderJson(test::Pack(embed, &n2));
  test::WriteFile(split / "b.safetensors", hdr_b, n2);
  std::vector<std::pair<std::string, std::string>> index;
  for (size_t i = 1; i < ts.size(); ++i) index.push_back({ts[i].name, "a.safetensors"});
  index.push_back({ts[0].name, "b.safetensors"});
  test::WriteBytes(split / "model.safetensors.index.json", IndexFor(index));
  const Checkpoint ck2 = Checkpoint::Open(split.path());
  ExpectBadModel([&] { GlobalsRange(ck2); }, {split.path(), "model-level tensors", "split across shards"});
  ExpectBadModel([&] { GlobalsRange(ck2, {false, true}); }, {"split across shards"});
}

// The project's generator writes the released layout; every tensor it writes must be named,
// shaped and typed as tensor_names says, and the ranges must be single runs.
TEST(TensorRanges, GeneratedTinyCheckpoint) {
  const std::string script = std::string(K3_SOURCE_DIR) + "/tests/generator/make_checkpoint.py";
  if (!std::filesystem::exists(script) || !std::filesystem::exists(K3_PYTHON_EXE))
    GTEST_SKIP() << "checkpoint generator or python not available: " << script;
  test::TempDir dir;
  const std::string cmd = std::string(K3_PYTHON_EXE) + " " + script + " " + dir.path() + " --preset tiny > " +
                          dir.path() + "/gen.log 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << test::ReadBytes(dir / "gen.log");
  const ModelConfig c = LoadModelConfig(dir / "config.json");
  const Checkpoint ck = Checkpoint::Open(dir.path());
  std::set<std::string> produced;
  for (int l = 0; l < c.num_layers; ++l) {
    for (TensorRole r : LayerTrunkRoles(c, l)) {
      const std::string n = LayerTensorName(l, r);
      produced.insert(n);
      ASSERT_TRUE(ck.has(n)) << n;
      EXPECT_EQ(ck.at(n).shape, ExpectedShape(c, r)) << n;
    }
    EXPECT_TRUE(LayerTrunkRange(ck, c, l).contiguous()) << "layer " << l;
    if (c.is_dense(l)) continue;
    for (int e = 0; e < c.num_experts; ++e) {
      const ByteRange r = ExpertRange(ck, l, e);
      EXPECT_EQ(r.end - r.begin, c.expert_bytes());
      for (ExpertProj w : {ExpertProj::kW1, ExpertProj::kW2, ExpertProj::kW3})
        for (bool s : {false, true}) {
          const std::string n = ExpertTensorName(l, e, w, s);
          produced.insert(n);
          EXPECT_EQ(ck.at(n).dtype, DType::U8);
          EXPECT_EQ(ck.at(n).shape, ExpectedExpertShape(c, w, s)) << n;
        }
    }
  }
  for (ModelRole r : {ModelRole::kEmbedTokens, ModelRole::kLmHead, ModelRole::kNorm, ModelRole::kOutputAttnResNorm,
                      ModelRole::kOutputAttnResProj}) {
    produced.insert(ModelTensorName(r));
    ASSERT_TRUE(ck.has(ModelTensorName(r))) << ModelTensorName(r);
    EXPECT_EQ(ck.at(ModelTensorName(r)).shape, ExpectedShape(c, r));
  }
  for (const auto& [name, info] : ck.all()) EXPECT_TRUE(produced.count(name)) << "unexpected tensor " << name;
  EXPECT_NO_THROW(ValidateCheckpoint(ck, c));
}

}  // namespace
}  // namespace k3
