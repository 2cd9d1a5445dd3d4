// The expert manifest (common/manifest.h, docs/formats.md "Expert manifest"): SHA-256 against
// the FIPS 180-2 test vectors, a write/read round trip, and every defect refused with exit 3.
#include "common/manifest.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "test_util.h"

namespace k3 {
namespace {

using test::ExpectBadModel;
using test::ReadBytes;
using test::TempDir;
using test::WriteBytes;

std::string Hex(const std::string& s) {
  return DigestHex(DigestBytes(reinterpret_cast<const uint8_t*>(s.data()), s.size()));
}

TEST(Manifest, Sha256KnownAnswers) {
  EXPECT_EQ(Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(Hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(Hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

// The chunked digest, written out from its definition with plain SHA-256 calls.
TEST(Manifest, ChunkedExpertDigest) {
  std::vector<uint8_t> bytes(kDigestChunkBytes * 2 + 1000);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 7 + (i >> 12));
  EXPECT_EQ(DigestChunks(0), 0u);
  EXPECT_EQ(DigestChunks(1), 1u);
  EXPECT_EQ(DigestChunks(kDigestChunkBytes), 1u);
  EXPECT_EQ(DigestChunks(bytes.size()), 3u);
  std::vector<uint8_t> cat;
  for (uint64_t at : {uint64_t{0}, kDigestChunkBytes, 2 * kDigestChunkBytes}) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(kDigestChunkBytes, bytes.size() - at));
    const ExpertDigest c = DigestBytes(bytes.data() + at, n);
    cat.insert(cat.end(), c.begin(), c.end());
  }
  EXPECT_EQ(ExpertDigestOf(bytes.data(), bytes.size()), DigestBytes(cat.data(), cat.size()));
  EXPECT_NE(ExpertDigestOf(bytes.data(), bytes.size()), DigestBytes(bytes.data(), bytes.size()));
  EXPECT_EQ(ExpertDigestOf(bytes.data(), 0), DigestBytes(nullptr, 0));
  // One byte changed anywhere changes the digest.
  const ExpertDigest before = ExpertDigestOf(bytes.data(), bytes.size());
  bytes[kDigestChunkBytes + 5] ^= 1;
  EXPECT_NE(ExpertDigestOf(bytes.data(), bytes.size()), before);
}

Manifest Sample() {
  Manifest m;
  m.trunk_only = true;
  m.first_layer = 1;
  m.num_layers = 3;
  m.num_experts = 4;
  m.shards = {{"model-00001-of-00002.safetensors", 123}, {"model-00002-of-00002.safetensors", 4567}};
  for (int i = 0; i < 8; ++i) {
    const std::string s = "expert " + std::to_string(i);
    m.digests.push_back(DigestBytes(reinterpret_cast<const uint8_t*>(s.data()), s.size()));
  }
  return m;
}

TEST(Manifest, RoundTrip) {
  TempDir dir;
  const Manifest m = Sample();
  WriteManifest(m, dir / kManifestFile);
  EXPECT_EQ(DefaultManifestPath(dir.path()), dir / kManifestFile);
  const Manifest r = LoadManifest(dir / kManifestFile);
  EXPECT_TRUE(r.trunk_only);
  EXPECT_EQ(r.first_layer, 1);
  EXPECT_EQ(r.num_layers, 3);
  EXPECT_EQ(r.num_experts, 4);
  ASSERT_EQ(r.shards.size(), 2u);
  EXPECT_EQ(r.shards[1].file, "model-00002-of-00002.safetensors");
  EXPECT_EQ(r.shards[1].bytes, 4567u);
  EXPECT_EQ(r.digests, m.digests);
  EXPECT_EQ(r.at(2, 3), m.digests[7]);
  EXPECT_EQ(r.at(1, 0), m.digests[0]);
  EXPECT_FALSE(r.has(0, 0));  // a dense layer has no routed experts
  EXPECT_FALSE(r.has(1, 4));
}

TEST(Manifest, DefectsAreBadModel) {
  TempDir dir;
  const std::string path = dir / kManifestFile;
  const std::string good = ManifestJson(Sample());
  ExpectBadModel([&] { LoadManifest(dir / "absent.json"); }, {"absent.json", "cannot open"});
  // Truncated anywhere: not JSON, or (cut between lines) a list that ends early.
  for (size_t cut : {size_t{0}, size_t{10}, good.size() / 2, good.size() - 3}) {
    WriteBytes(path, good.substr(0, cut));
    ExpectBadModel([&] { LoadManifest(path); }, {path});
  }
  auto with = [&](const std::string& from, const std::string& to) {
    std::string s = good;
    const size_t at = s.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    s.replace(at, from.size(), to);
    WriteBytes(path, s);
  };
  with("\"version\": 1", "\"version\": 2");
  ExpectBadModel([&] { LoadManifest(path); }, {"version 2"});
  with("k3-expert-manifest", "something-else");
  ExpectBadModel([&] { LoadManifest(path); }, {"format"});
  with("\"hash\": \"sha256-chunks\"", "\"hash\": \"sha256\"");
  ExpectBadModel([&] { LoadManifest(path); }, {"hash"});
  with("\"chunk_bytes\": 4194304", "\"chunk_bytes\": 1048576");
  ExpectBadModel([&] { LoadManifest(path); }, {"chunk_bytes"});
  with("\"num_experts\": 4", "\"num_experts\": 5");
  ExpectBadModel([&] { LoadManifest(path); }, {"8 expert digests, expected 10"});
  with("\"trunk_only\": true", "\"trunk_only\": 1");
  ExpectBadModel([&] { LoadManifest(path); }, {"trunk_only"});
  with("\"trunk_only\": true", "\"trunk_only\": true, \"extra\": 0");
  ExpectBadModel([&] { LoadManifest(path); }, {"unknown key 'extra'"});
  with("model-00001-of-00002.safetensors", "../escape");
  ExpectBadModel([&] { LoadManifest(path); }, {"not a file name"});
  const std::string d7 = DigestHex(Sample().digests[7]);
  with(d7, d7.substr(0, 63) + "g");
  ExpectBadModel([&] { LoadManifest(path); }, {"layer 2 expert 3", "64 lower-case hex"});
  with(d7, d7.substr(0, 62));
  ExpectBadModel([&] { LoadManifest(path); }, {"layer 2 expert 3"});
  WriteBytes(path, good);
  EXPECT_EQ(LoadManifest(path).digests.size(), 8u);
}

TEST(Manifest, MustFitTheModel) {
  const Manifest m = Sample();
  ModelConfig cfg;
  cfg.first_k_dense_replace = 1;
  cfg.num_layers = 3;
  cfg.num_experts = 4;
  CheckManifestFits(m, cfg, "m.json");
  cfg.num_experts = 8;
  ExpectBadModel([&] { CheckManifestFits(m, cfg, "m.json"); }, {"m.json", "x 4 experts", "x 8"});
}

TEST(Manifest, UnwritablePathIsOutputError) {
  test::ExpectError([&] { WriteManifest(Sample(), "/nonexistent-dir/k3-manifest.json"); }, kExitOutput,
                    {"/nonexistent-dir/k3-manifest.json"});
}

}  // namespace
}  // namespace k3
