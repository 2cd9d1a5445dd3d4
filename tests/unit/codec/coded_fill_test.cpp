// Decoding a layer's coded runs in place in its ring slot (common/codec/coded_fill.h): the read's
// placement, the in-place rule, and bytes equal to the source.
#include "common/codec/coded_fill.h"

#include <gtest/gtest.h>

#include <cstring>

#include "codec_test_util.h"
#include "common/error.h"

namespace k3::codec {
namespace {

constexpr uint64_t kPage = 4096;

// A layer of two bf16 runs (Gaussian, like trained weights) laid out as pack-trunk does: runs at
// 4096-aligned offsets of a data file whose first run starts after the header.
struct Layer {
  CodedTrunk t;
  std::vector<uint8_t> source, file;
};

Layer MakeLayer() {
  Layer l;
  l.source = test::GaussianBf16(3 * 32768 + 1000, 0.02, 7);  // frames: 3 whole and a partial one
  const uint64_t half = 2 * 32768 * 2;                       // the runs meet at a frame boundary
  l.t.num_layers = 1;
  l.file.assign(kCodedHeaderBytes, 0);
  for (auto [b, e] : {std::pair<uint64_t, uint64_t>{0, half}, {half, l.source.size()}}) {
    const std::vector<uint8_t> coded = EncodeRun(l.source.data() + b, e - b, {{0, e - b}});
    CodedRun r;
    r.layer = 0;
    r.begin = 1000 + b;  // where the layer's trunk sits in its shard
    r.end = 1000 + e;
    r.coded_offset = l.file.size();
    r.coded_bytes = coded.size();
    r.coded_digest = ExpertDigestOf(coded.data(), coded.size());
    l.file.insert(l.file.end(), coded.begin(), coded.end());
    l.file.resize((l.file.size() + kPage - 1) / kPage * kPage, 0);
    l.t.runs.push_back(r);
  }
  l.t.file_bytes = l.file.size();
  return l;
}

// Reads the layer into a slot of `slot_bytes` the way the trunk reader does; the layer's first
// trunk byte goes to `lead`. Returns false when it cannot be decoded in place there.
bool FillSlot(const Layer& l, uint64_t slot_bytes, uint64_t lead, std::vector<uint8_t>& slot, bool check = true) {
  const LayerRuns runs = RunsByLayer(l.t)[0];
  const auto rd = PlanCodedRead(l.t, runs, slot_bytes);
  if (!rd) return false;
  EXPECT_EQ(rd->slot_offset % kPage, 0u);
  EXPECT_EQ(rd->bytes, CodedReadBytes(l.t, runs));
  slot.assign(slot_bytes, 0xAA);
  std::memcpy(slot.data() + rd->slot_offset, l.file.data() + rd->file_offset, rd->bytes);
  const auto parsed = ParseLayerRuns(l.t, runs, *rd, slot.data(), lead, check);
  if (!InPlaceFits(parsed)) return false;
  DecodeInPlace(parsed, slot.data());
  return true;
}

TEST(CodedFill, DecodesInPlaceToTheSourceWithTheSlotMargin) {
  const Layer l = MakeLayer();
  const LayerRuns runs = RunsByLayer(l.t)[0];
  EXPECT_EQ(runs.first, 0u);
  EXPECT_EQ(runs.last, 2u);
  EXPECT_EQ(runs.source_bytes, l.source.size());
  EXPECT_LT(runs.coded_bytes, l.source.size() * 3 / 4);
  const uint64_t lead = 1000 % kPage;  // the window starts at the shard's page
  const uint64_t window = (lead + l.source.size() + kPage - 1) / kPage * kPage;
  std::vector<uint8_t> slot;
  ASSERT_TRUE(FillSlot(l, window + 1024 * 1024, lead, slot));  // plan::kCodedSlotMargin
  EXPECT_EQ(0, std::memcmp(slot.data() + lead, l.source.data(), l.source.size()));
}

TEST(CodedFill, ASlotWithoutRoomIsNotDecodedInPlace) {
  const Layer l = MakeLayer();
  std::vector<uint8_t> slot;
  // Exactly the layer: the last frames' output would overrun their own coded bytes.
  EXPECT_FALSE(FillSlot(l, (l.source.size() + kPage - 1) / kPage * kPage, 0, slot));
  EXPECT_FALSE(FillSlot(l, kPage, 0, slot));  // smaller than the coded read itself
}

TEST(CodedFill, AChangedCodedByteIsRefusedNamingTheRun) {
  Layer l = MakeLayer();
  l.file[l.t.runs[1].coded_offset + l.t.runs[1].coded_bytes / 2] ^= 1;
  std::vector<uint8_t> slot;
  try {
    FillSlot(l, 4 * l.source.size(), 0, slot);
    FAIL() << "a changed coded byte was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), kExitBadModel);
    EXPECT_NE(std::string(e.what()).find("coded trunk run 1 (layer 0)"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace k3::codec
