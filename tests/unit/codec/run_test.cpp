// Coded runs (common/codec/coded_run.h): a layer-like run of bf16 tensors, f32 tensors and gaps
// round-trips byte for byte; every truncation and every flipped byte of a coded run is refused
// or decodes without touching memory outside the run (ASan checks the latter).
#include <gtest/gtest.h>

#include <string>

#include "codec_test_util.h"
#include "common/codec/coded_run.h"
#include "common/error.h"

namespace k3::codec {
namespace {

struct Layer {
  std::vector<uint8_t> bytes;
  std::vector<Bf16Span> spans;
};

// bf16 tensors of odd value counts (one spanning two frames plus a value), an f32 tensor and
// odd gaps, as a layer's trunk run can hold.
Layer MakeLayer() {
  Layer l;
  auto add_bf16 = [&](size_t values, double sigma, uint32_t seed) {
    const auto b = test::GaussianBf16(values, sigma, seed);
    l.spans.push_back({l.bytes.size(), b.size()});
    l.bytes.insert(l.bytes.end(), b.begin(), b.end());
  };
  auto add_raw = [&](size_t n, uint8_t seed) {
    for (size_t i = 0; i < n; ++i) l.bytes.push_back(static_cast<uint8_t>(seed + 31 * i));
  };
  add_bf16(2 * kFrameValues + 1, 0.02, 1);
  add_raw(3, 7);  // a gap of odd length
  add_bf16(33, 0.5, 2);
  add_raw(4 * 100, 9);  // an f32 tensor
  add_bf16(1, 1.0, 3);
  add_raw(kRawFrameBytes + 5, 11);  // more than one raw frame
  add_bf16(4097, 0.001, 4);
  return l;
}

std::vector<uint8_t> DecodeAll(const std::vector<uint8_t>& coded, uint64_t n, Isa isa) {
  std::vector<uint8_t> out(n, 0xA5);
  DecodeRun(coded.data(), coded.size(), out.data(), out.size(), isa);
  return out;
}

TEST(Run, LayerLikeRunRoundTrips) {
  const Layer l = MakeLayer();
  const std::vector<uint8_t> coded = EncodeRun(l.bytes.data(), l.bytes.size(), l.spans);
  EXPECT_LT(coded.size(), l.bytes.size());
  EXPECT_EQ(DecodeAll(coded, l.bytes.size(), Isa::kScalar), l.bytes);
  if (test::HasAvx2()) {
    EXPECT_EQ(DecodeAll(coded, l.bytes.size(), Isa::kAvx2), l.bytes);
  }
  // Frames decode on their own, in any order (threads split a run by frames).
  uint64_t n = 0;
  const std::vector<RunFrame> frames = ParseRun(coded.data(), coded.size(), &n);
  ASSERT_EQ(n, l.bytes.size());
  EXPECT_EQ(frames.size(), 3u + 1u + 1u + 1u + 1u + 2u + 1u);
  std::vector<uint8_t> out(n, 0);
  for (size_t i = frames.size(); i-- > 0;) DecodeFrames(frames, i, i + 1, coded.data(), out.data());
  EXPECT_EQ(out, l.bytes);
  // The same bytes give the same code.
  EXPECT_EQ(EncodeRun(l.bytes.data(), l.bytes.size(), l.spans), coded);
}

TEST(Run, EmptyRunAndOnlyRawBytes) {
  const std::vector<uint8_t> none = EncodeRun(nullptr, 0, {});
  EXPECT_EQ(none.size(), kRunHeaderBytes);
  EXPECT_TRUE(DecodeAll(none, 0, Isa::kScalar).empty());
  const std::vector<uint8_t> raw = {5, 4, 3, 2, 1};
  EXPECT_EQ(DecodeAll(EncodeRun(raw.data(), raw.size(), {}), raw.size(), Isa::kScalar), raw);
}

TEST(Run, RefusesEveryTruncationAndAWrongLength) {
  const auto b = test::GaussianBf16(300, 0.05, 9);
  const std::vector<uint8_t> coded = EncodeRun(b.data(), b.size(), {{0, b.size()}});
  std::vector<uint8_t> out(b.size());
  for (size_t len = 0; len < coded.size(); ++len) {
    try {
      DecodeRun(coded.data(), len, out.data(), out.size());
      ADD_FAILURE() << "accepted " << len << " of " << coded.size() << " bytes";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), kExitBadModel);
    }
  }
  try {
    DecodeRun(coded.data(), coded.size(), out.data(), out.size() - 2);
    ADD_FAILURE() << "accepted a run for another length";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("decodes to 600 bytes, expected 598"), std::string::npos) << e.what();
  }
}

TEST(Run, AnyFlippedByteIsRefusedOrStaysInBounds) {
  // A coded run's digest is what detects a changed byte (the manifest); the decoder's part is to
  // refuse what it can and never read or write outside the run, whatever the bytes say.
  Layer l;
  l.bytes = test::GaussianBf16(200, 0.02, 5);
  l.spans = {{0, 64}, {70, 300}};
  const std::vector<uint8_t> coded = EncodeRun(l.bytes.data(), l.bytes.size(), l.spans);
  int refused = 0;
  for (size_t at = 0; at < coded.size(); ++at) {
    for (uint8_t flip : {uint8_t{0x01}, uint8_t{0x80}, uint8_t{0xFF}}) {
      std::vector<uint8_t> bad = coded;
      bad[at] ^= flip;
      std::vector<uint8_t> out(l.bytes.size());
      try {
        DecodeRun(bad.data(), bad.size(), out.data(), out.size());
      } catch (const Error& e) {
        EXPECT_EQ(e.code(), kExitBadModel);
        ++refused;
      }
    }
  }
  EXPECT_GT(refused, 0);
}

}  // namespace
}  // namespace k3::codec
