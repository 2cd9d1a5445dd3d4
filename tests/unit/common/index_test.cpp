// Sharded checkpoints: index + shards must agree; the index itself is untrusted input.
#include <gtest/gtest.h>
#include <zlib.h>

#include "common/safetensors.h"
#include "test_util.h"

namespace k3 {
namespace {

using test::ExpectBadModel;

constexpr const char* kShard1 = "model-00001-of-000002.safetensors";
constexpr const char* kShard2 = "model-00002-of-000002.safetensors";

class IndexTest : public ::testing::Test {
 protected:
  void SetUp() override {
    int64_t n1 = 0, n2 = 0;
    {
      const std::string hdr = test::HeaderJson(test::Pack({{"l0.a", "F32", {4}}, {"l0.b", "BF16", {2, 2}}}, &n1));
      test::WriteFile(dir_ / kShard1, hdr, n1);
    }
    {
      const std::string hdr = test::HeaderJson(test::Pack({{"head", "BF16", {3}}, {"extra", "U8", {5}}}, &n2));
      test::WriteFile(dir_ / kShard2, hdr, n2);
    }
  }
  // weight_map entries as JSON text, e.g. "\"l0.a\":\"shard\"".
  void WriteIndex(const std::string& entries, const std::string& total = "30") {
    test::WriteBytes(dir_ / "model.safetensors.index.json",
                     "{\"metadata\":{\"total_size\":" + total + "},\"weight_map\":{" + entries + "}}");
  }
  std::string GoodEntries() {
    return std::string("\"l0.a\":\"") + kShard1 + "\",\"l0.b\":\"" + kShard1 + "\",\"head\":\"" + kShard2 + "\"";
  }
  std::string IndexPath() { return dir_ / "model.safetensors.index.json"; }
  test::TempDir dir_;
};

TEST_F(IndexTest, ControlOpensShardsThroughIndex) {
  WriteIndex(GoodEntries());
  // A shard the index does not name is never opened, even if it is garbage.
  test::WriteBytes(dir_ / "model-00099-of-000099.safetensors", "junk");
  const Checkpoint ck = Checkpoint::Open(dir_.path());
  ASSERT_EQ(ck.shard_paths().size(), 2u);
  EXPECT_EQ(ck.shard_paths()[0], dir_ / kShard1);
  EXPECT_EQ(ck.shard_paths()[1], dir_ / kShard2);
  EXPECT_EQ(ck.all().size(), 3u);  // "extra" is in a shard but not in the index
  EXPECT_FALSE(ck.has("extra"));
  const TensorInfo& head = ck.at("head");
  EXPECT_EQ(head.shard, 1);
  EXPECT_EQ(head.nbytes, 6);
  EXPECT_EQ(ck.at("l0.b").shard, 0);
  EXPECT_EQ(ck.at("l0.b").file_offset, ck.at("l0.a").file_offset + 16);
  ExpectBadModel([&] { ck.at("nope"); }, {dir_.path(), "nope", "not found"});
}

TEST_F(IndexTest, ControlSingleFile) {
  test::TempDir d;
  int64_t n = 0;
  {
    const std::string hdr = test::HeaderJson(test::Pack({{"x", "F32", {2}}}, &n));
    test::WriteFile(d / "model.safetensors", hdr, n);
  }
  const Checkpoint ck = Checkpoint::Open(d.path());
  ASSERT_EQ(ck.shard_paths().size(), 1u);
  EXPECT_TRUE(ck.has("x"));
  EXPECT_EQ(ck.at("x").shard, 0);
}

TEST_F(IndexTest, EmptyDirectory) {
  test::TempDir d;
  ExpectBadModel([&] { Checkpoint::Open(d.path()); }, {d.path(), "model.safetensors"});
}

TEST_F(IndexTest, IndexNamesMissingShard) {
  WriteIndex(GoodEntries() + ",\"ghost\":\"model-00003-of-000003.safetensors\"");
  ExpectBadModel([&] { Checkpoint::Open(dir_.path()); }, {"model-00003-of-000003.safetensors", "cannot open"});
}

TEST_F(IndexTest, IndexNamesTensorAbsentFromShard) {
  WriteIndex(GoodEntries() + ",\"l0.c\":\"" + kShard1 + "\"");
  ExpectBadModel([&] { Checkpoint::Open(dir_.path()); }, {IndexPath(), "l0.c", kShard1});
}

TEST_F(IndexTest, TensorListedInWrongShard) {
  WriteIndex(std::string("\"l0.a\":\"") + kShard2 + "\"");
  ExpectBadModel([&] { Checkpoint::Open(dir_.path()); }, {IndexPath(), "l0.a", kShard2});
}

TEST_F(IndexTest, ShardNameEscapingDirectory) {
  for (const std::string bad : {"../x", "sub/x.safetensors", "..", ""}) {
    WriteIndex(GoodEntries() + ",\"evil\":\"" + bad + "\"");
    ExpectBadModel([&] { Checkpoint::Open(dir_.path()); }, {IndexPath(), "evil", "plain file name"});
  }
}

TEST_F(IndexTest, DuplicateIndexEntries) {
  WriteIndex(GoodEntries() + ",\"l0.a\":\"" + kShard1 + "\"");
  ExpectBadModel([&] { Checkpoint::Open(dir_.path()); }, {IndexPath(), "duplicate", "l0.a"});
}

TEST_F(IndexTest, BadIndexTypes) {
  ExpectBadModel([&] { ParseSafetensorsIndex("{\"weight_map\":{\"a\":3}}", "idx.json"); }, {"idx.json", "tensor a"});
  ExpectBadModel([&] { ParseSafetensorsIndex("{\"weight_map\":[]}", "idx.json"); }, {"idx.json", "weight_map"});
  ExpectBadModel([&] { ParseSafetensorsIndex("{}", "idx.json"); }, {"idx.json", "weight_map"});
  ExpectBadModel([&] { ParseSafetensorsIndex("{\"metadata\":{\"total_size\":-1},\"weight_map\":{\"a\":\"s\"}}", "idx.json"); },
                 {"idx.json", "total_size"});
  ExpectBadModel([&] { ParseSafetensorsIndex("{\"weight_map\":{\"a\":\"s\"", "idx.json"); }, {"idx.json", "invalid JSON"});
  const SafetensorsIndex ok = ParseSafetensorsIndex("{\"metadata\":{\"total_size\":7},\"weight_map\":{\"a\":\"s\"}}", "i");
  EXPECT_EQ(ok.total_size, 7);
  EXPECT_EQ(ok.weight_map.at("a"), "s");
}

TEST_F(IndexTest, CorruptShardIsReportedByShardName) {
  WriteIndex(GoodEntries());
  std::string b = test::ReadBytes(dir_ / kShard2);
  b[8] = '!';
  test::WriteBytes(dir_ / kShard2, b);
  ExpectBadModel([&] { Checkpoint::Open(dir_.path()); }, {kShard2, "invalid JSON"});
}

TEST_F(IndexTest, GzipIndex) {
  const std::string text = std::string("{\"weight_map\":{\"l0.a\":\"") + kShard1 + "\",\"head\":\"" + kShard2 + "\"}}";
  const std::string gz_path = dir_ / "index.json.gz";
  gzFile gz = gzopen(gz_path.c_str(), "wb");
  ASSERT_NE(gz, nullptr);
  ASSERT_EQ(gzwrite(gz, text.data(), static_cast<unsigned>(text.size())), static_cast<int>(text.size()));
  ASSERT_EQ(gzclose(gz), Z_OK);
  const SafetensorsIndex idx = LoadSafetensorsIndex(gz_path);
  EXPECT_EQ(idx.weight_map.size(), 2u);
  EXPECT_EQ(idx.weight_map.at("head"), kShard2);
  EXPECT_EQ(idx.total_size, -1);

  // Plain file through the same loader.
  test::WriteBytes(dir_ / "index.json", text);
  EXPECT_EQ(LoadSafetensorsIndex(dir_ / "index.json").weight_map.size(), 2u);

  // A gzip stream cut in half must not parse as a shorter valid index.
  const std::string full = test::ReadBytes(gz_path);
  test::WriteBytes(gz_path, full.substr(0, full.size() / 2));
  ExpectBadModel([&] { LoadSafetensorsIndex(gz_path); }, {gz_path});
  ExpectBadModel([&] { LoadSafetensorsIndex(dir_ / "absent.json.gz"); }, {"absent.json.gz"});
}

}  // namespace
}  // namespace k3
