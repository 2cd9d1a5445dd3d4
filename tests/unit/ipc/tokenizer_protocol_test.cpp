// Tokenizer protocol codec: round trip of every message (including non-UTF-8 text bytes and
// a prompt-sized Encode), and rejection of truncated, oversized, mislabelled, out-of-range
// and foreign buffers. No sockets: the codec is pure.
#include <gtest/gtest.h>

#include <random>

#include "common/ipc/protocol.h"
#include "tests/unit/ipc/token_message.h"

namespace k3::ipc {
namespace {

std::span<const uint8_t> KindSpan(const std::array<uint8_t, 2>& k) { return {k.data(), k.size()}; }

template <class M>
void RoundTrip(const M& m, const std::string& name) {
  Encoded e = Encode(m);
  EXPECT_EQ(KindName(e.kind), name);
  EXPECT_EQ(e.kind.protocol, Protocol::kTokenizer);
  auto kind = e.kind.bytes();
  auto r = DecodeTokenizer(KindSpan(kind), e.payload);
  ASSERT_TRUE(r.ok()) << name << ": " << r.error();
  ASSERT_TRUE(std::holds_alternative<M>(r.value())) << name;
  EXPECT_EQ(std::get<M>(r.value()), m) << name;
}

TEST(TokenizerProtocol, RoundTrip) {
  namespace tk = tokenizer;  // (using-directive would clash with ipc::Encode / ipc::Encoded)
  std::string binary;
  for (int b = 0; b < 256; ++b) binary += static_cast<char>(b);  // NUL and invalid UTF-8 too
  RoundTrip(tk::Encode{7, "hello world", false}, "tokenizer.Encode");
  RoundTrip(tk::Encode{8, binary, true}, "tokenizer.Encode");
  RoundTrip(tk::Encode{9, "", false}, "tokenizer.Encode");
  RoundTrip(tk::EncodedIds{7, {0, 1, 163839, 255}}, "tokenizer.EncodedIds");
  RoundTrip(tk::EncodedIds{7, {}}, "tokenizer.EncodedIds");
  RoundTrip(tk::Decode{3, {104, 105}, false, false}, "tokenizer.Decode");
  RoundTrip(tk::Decode{4, {228}, true, false}, "tokenizer.Decode");
  RoundTrip(tk::Decode{4, {}, true, true}, "tokenizer.Decode");
  RoundTrip(tk::Decoded{4, "\xe4\xbd"}, "tokenizer.Decoded");
  RoundTrip(tk::RenderChat{5, "{\"role\":\"user\",\"content\":\"hi\"}\n", false, "low", "", tk::ToolChoice::kAuto, false, ""}, "tokenizer.RenderChat");
  RoundTrip(tk::RenderChat{6, "", true, "", "", tk::ToolChoice::kAuto, false, ""}, "tokenizer.RenderChat");
  RoundTrip(tk::RenderChat{7, "{\"role\":\"user\",\"content\":\"hi\"}\n", true, "max", "[{\"type\":\"function\"}]",
                           tk::ToolChoice::kNamed, true, "get_weather"},
            "tokenizer.RenderChat");
  RoundTrip(tk::Failed{5, tk::Error::kUnknownId, "id 999999 is not in the vocabulary"}, "tokenizer.Failed");
}

TEST(TokenizerProtocol, LongPromptFitsLimit) {
  // 8 MiB of text is a long prompt file; it must travel, and 17 MiB must not.
  tokenizer::Encode big{1, std::string(8u << 20, 'a'), false};
  RoundTrip(big, "tokenizer.Encode");
  tokenizer::Encode huge{1, std::string(17u << 20, 'a'), false};
  Encoded e = Encode(huge);
  auto kind = e.kind.bytes();
  auto r = DecodeTokenizer(KindSpan(kind), e.payload);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().find("exceeds limit"), std::string::npos) << r.error();
}

TEST(TokenizerProtocol, EveryTruncationRejected) {
  Encoded e = Encode(tokenizer::Decode{3, {1, 2, 3, 4}, true, false});
  auto kind = e.kind.bytes();
  for (size_t n = 0; n < e.payload.size(); ++n) {
    std::vector<uint8_t> cut(e.payload.begin(), e.payload.begin() + static_cast<long>(n));
    EXPECT_FALSE(DecodeTokenizer(KindSpan(kind), cut).ok()) << "prefix of " << n << " bytes accepted";
  }
  auto padded = e.payload;
  padded.push_back(0);
  EXPECT_FALSE(DecodeTokenizer(KindSpan(kind), padded).ok());
}

TEST(TokenizerProtocol, GarbageAndFlippedBytesRejectedOrSafe) {
  std::mt19937 rng(11);
  const std::array<uint8_t, 2> kind{static_cast<uint8_t>(Protocol::kTokenizer), 1};
  int accepted = 0;
  for (int i = 0; i < 2000; ++i) {
    std::vector<uint8_t> junk(8 + rng() % 200);
    for (auto& b : junk) b = static_cast<uint8_t>(rng());
    accepted += DecodeTokenizer(KindSpan(kind), junk).ok();
  }
  EXPECT_EQ(accepted, 0);
  Encoded e = Encode(tokenizer::Encode{11, "some text", false});
  auto k = e.kind.bytes();
  int rejected = 0;
  for (size_t i = 0; i < e.payload.size(); ++i) {
    auto bad = e.payload;
    bad[i] ^= 0xff;
    rejected += !DecodeTokenizer(KindSpan(k), bad).ok();  // ASan checks nothing is overread
  }
  EXPECT_GT(rejected, 0);
}

TEST(TokenizerProtocol, KindMustMatchPayload) {
  Encoded e = Encode(tokenizer::EncodedIds{1, {2}});
  std::array<uint8_t, 2> lie = Encode(tokenizer::Decode{1, {2}, false, false}).kind.bytes();
  auto r = DecodeTokenizer(KindSpan(lie), e.payload);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().find("tokenizer.EncodedIds"), std::string::npos) << r.error();
}

TEST(TokenizerProtocol, OtherProtocolsRejectedBothWays) {
  Encoded c = Encode(ATokenMessage(1, 2, 3));
  auto ck = c.kind.bytes();
  EXPECT_FALSE(DecodeTokenizer(KindSpan(ck), c.payload).ok());
  std::array<uint8_t, 2> relabelled{static_cast<uint8_t>(Protocol::kTokenizer), ck[1]};
  auto r = DecodeTokenizer(KindSpan(relabelled), c.payload);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().find("verification"), std::string::npos) << r.error();
  Encoded t = Encode(tokenizer::Decoded{1, "x"});
  auto tk = t.kind.bytes();
  EXPECT_FALSE(DecodeCompute(KindSpan(tk), t.payload).ok());
  EXPECT_FALSE(DecodeControl(KindSpan(tk), t.payload).ok());
}

TEST(TokenizerProtocol, EnumOutOfRangeRejected) {
  Encoded e = Encode(tokenizer::Failed{1, static_cast<tokenizer::Error>(42), "?"});
  auto kind = e.kind.bytes();
  EXPECT_FALSE(DecodeTokenizer(KindSpan(kind), e.payload).ok());
}

TEST(TokenizerProtocol, KindNames) {
  EXPECT_EQ(KindName(Kind{Protocol::kTokenizer, 6}), "tokenizer.Failed");
  EXPECT_EQ(KindName(Kind{Protocol::kTokenizer, 7}).substr(0, 4), "<bad");
  EXPECT_EQ(KindName(Kind{Protocol::kTokenizer, 0}).substr(0, 4), "<bad");
}

}  // namespace
}  // namespace k3::ipc
