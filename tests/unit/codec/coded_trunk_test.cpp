// The coded trunk's pieces that need no checkpoint (common/codec/coded_trunk.h): cutting a run at
// frame boundaries, the manifest's text and its refusals, the data file's header.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "codec_test_util.h"
#include "common/codec/coded_trunk.h"
#include "common/error.h"

namespace k3::codec {
namespace {

TEST(CodedTrunk, CutRunCutsAtFrameBoundariesAndKeepsTheBytes) {
  // A run of two bf16 tensors with an odd gap, cut into pieces of at most 3 frames.
  CodedRun whole;
  whole.layer = 2;
  whole.shard = 1;
  whole.begin = 1000;
  const uint64_t a = 5 * 2ull * kFrameValues + 6, gap = 7, b = 2 * 2ull * kFrameValues;
  whole.end = whole.begin + a + gap + b;
  whole.spans = {{0, a}, {a + gap, b}};
  const uint64_t max = 3 * 2ull * kFrameValues;
  const std::vector<CodedRun> parts = CutRun(whole, max);
  std::vector<uint8_t> src = test::GaussianBf16((whole.end - whole.begin + 1) / 2, 0.02, 3);
  src.resize(whole.end - whole.begin);
  const std::vector<uint8_t> all = EncodeRun(src.data(), src.size(), whole.spans);
  uint64_t at = whole.begin, frames = 0;
  for (const CodedRun& p : parts) {
    EXPECT_EQ(p.layer, 2);
    EXPECT_EQ(p.shard, 1);
    EXPECT_EQ(p.begin, at);
    EXPECT_LE(p.end - p.begin, max);
    // Each part decodes to its bytes; together they have the whole run's frames.
    const std::vector<uint8_t> coded = EncodeRun(src.data() + (p.begin - whole.begin), p.end - p.begin, p.spans);
    std::vector<uint8_t> out(p.end - p.begin);
    DecodeRun(coded.data(), coded.size(), out.data(), out.size());
    EXPECT_TRUE(std::equal(out.begin(), out.end(), src.begin() + static_cast<std::ptrdiff_t>(p.begin - whole.begin)));
    uint64_t n = 0;
    frames += ParseRun(coded.data(), coded.size(), &n).size();
    at = p.end;
  }
  EXPECT_EQ(at, whole.end);
  uint64_t n = 0;
  EXPECT_EQ(frames, ParseRun(all.data(), all.size(), &n).size());
  // Frames of 64 KiB x5 and 6 bytes (the first tensor), 7 (the gap), 64 KiB x2 (the second): parts
  // of 3 whole frames; 2 whole, the 6-byte and the gap frame (3 x 64 KiB would be 13 bytes over); 2.
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_EQ(parts[1].end - parts[1].begin, 2 * 2ull * kFrameValues + 6 + 7);
  ASSERT_EQ(parts[1].spans.size(), 1u);  // the first tensor's rest, from the part's first byte
  EXPECT_EQ(parts[1].spans[0].offset, 0u);
  EXPECT_EQ(parts[1].spans[0].bytes, 2 * 2ull * kFrameValues + 6);
  ASSERT_EQ(parts[2].spans.size(), 1u);
  EXPECT_EQ(parts[2].spans[0].bytes, b);
}

CodedTrunk SmallTrunk() {
  CodedTrunk t;
  t.num_layers = 1;
  t.shards = {{"model-00001-of-000002.safetensors", 50000}, {"model-00002-of-000002.safetensors", 9000}};
  CodedRun r0, r1;
  r0.layer = 0, r0.shard = 0, r0.begin = 64, r0.end = 40000, r0.coded_offset = 4096, r0.coded_bytes = 30000;
  r1.layer = 1, r1.shard = 1, r1.begin = 128, r1.end = 9000, r1.coded_offset = 36864, r1.coded_bytes = 7000;
  r0.digest[0] = 1, r1.digest[31] = 2, r0.coded_digest[5] = 3, r1.coded_digest[6] = 4;
  t.runs = {r0, r1};
  t.pack_id = PackId(t.runs);
  t.file_bytes = 36864 + 8192;
  return t;
}

std::string TempFile(const std::string& text) {
  char name[] = "/tmp/k3-coded-manifest-XXXXXX";
  const int fd = mkstemp(name);
  EXPECT_GE(fd, 0);
  EXPECT_EQ(write(fd, text.data(), text.size()), static_cast<ssize_t>(text.size()));
  close(fd);
  return name;
}

void ExpectRefused(const std::string& text, const std::string& words) {
  const std::string path = TempFile(text);
  try {
    LoadCodedTrunk(path);
    ADD_FAILURE() << "accepted; wanted: " << words;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), kExitBadModel);
    EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
  }
  std::remove(path.c_str());
}

std::string Replace(std::string s, const std::string& from, const std::string& to) {
  const size_t at = s.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return s.replace(at, from.size(), to);
}

TEST(CodedTrunk, ManifestRoundTripsAndRefusesWhatItDoesNotKnow) {
  const CodedTrunk t = SmallTrunk();
  const std::string text = CodedTrunkJson(t);
  const std::string path = TempFile(text);
  const CodedTrunk back = LoadCodedTrunk(path);
  std::remove(path.c_str());
  EXPECT_EQ(back.pack_id, t.pack_id);
  EXPECT_EQ(back.file_bytes, t.file_bytes);
  ASSERT_EQ(back.runs.size(), 2u);
  EXPECT_EQ(back.runs[1].begin, 128u);
  EXPECT_EQ(back.runs[1].digest, t.runs[1].digest);
  EXPECT_EQ(back.runs[0].coded_digest, t.runs[0].coded_digest);
  EXPECT_EQ(back.shards[1].file, t.shards[1].file);

  ExpectRefused(text.substr(0, text.size() / 2), "coded trunk manifest");
  ExpectRefused(Replace(text, "\"version\": 1", "\"version\": 2"), "has version 2");
  ExpectRefused(Replace(text, "bf16-hi3-esc4", "bf16-huffman"), "'codec' is not");
  ExpectRefused(Replace(text, "\"num_layers\"", "\"extra\": 1, \"num_layers\""), "unknown key 'extra'");
  ExpectRefused(Replace(text, "\"coded_offset\": 36864", "\"coded_offset\": 36865"), "4096-aligned");
  ExpectRefused(Replace(text, "\"coded_offset\": 36864", "\"coded_offset\": 4096"), "after the previous run");
  ExpectRefused(Replace(text, "\"shard\": 1", "\"shard\": 2"), "run 1 'shard'");
  ExpectRefused(Replace(text, "\"end\": 9000", "\"end\": 9001"), "run 1 'end'");  // past its shard
}

TEST(CodedTrunk, HeaderNamesForeignAndOtherFiles) {
  const CodedTrunk t = SmallTrunk();
  const auto h = CodedHeader(t);
  CheckCodedHeader(h.data(), h.size(), t, "f");
  auto refused = [&](std::array<uint8_t, kCodedHeaderBytes> bad, uint64_t got, const std::string& words) {
    try {
      CheckCodedHeader(bad.data(), got, t, "f");
      ADD_FAILURE() << "accepted; wanted: " << words;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), kExitBadModel);
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
  };
  refused(h, 100, "shorter than a coded trunk's header");
  auto other = h;
  other[0] = 'X';
  refused(other, h.size(), "not a coded trunk");
  other = h;
  other[8] = 2;
  refused(other, h.size(), "version 2");
  other = h;
  other[40] ^= 1;
  refused(other, h.size(), "a coded trunk of other weights");
  other = h;
  other[12] = 3;
  refused(other, h.size(), "3 runs");
  other = h;
  other[4000] = 1;
  refused(other, h.size(), "reserved");
}

}  // namespace
}  // namespace k3::codec
