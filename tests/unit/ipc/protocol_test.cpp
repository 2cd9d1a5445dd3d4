// Round trip of every message, and rejection of truncated, garbage, oversized and
// mislabelled buffers. No sockets: the codec is pure.
#include "common/ipc/protocol.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "tests/unit/ipc/token_message.h"

namespace k3::ipc {
namespace {

std::span<const uint8_t> KindSpan(const std::array<uint8_t, 2>& k) { return {k.data(), k.size()}; }

template <class M, class Decode>
void RoundTrip(const M& m, Decode decode, const std::string& name) {
  Encoded e = Encode(m);
  EXPECT_EQ(KindName(e.kind), name);
  auto kind = e.kind.bytes();
  auto r = decode(KindSpan(kind), e.payload);
  ASSERT_TRUE(r.ok()) << name << ": " << r.error();
  ASSERT_TRUE(std::holds_alternative<M>(r.value())) << name;
  EXPECT_EQ(std::get<M>(r.value()), m) << name;
}

TEST(Protocol, ControlRoundTrip) {
  RoundTrip(control::Hello{"trunk-reader", 4242}, DecodeControl, "control.Hello");
  RoundTrip(control::Ready{"compute", {{"rss_bytes", 1.5e9}, {"startup_s", 0.25}}}, DecodeControl, "control.Ready");
  RoundTrip(control::Shutdown{"user pressed ctrl-c"}, DecodeControl, "control.Shutdown");
  RoundTrip(control::Dead{"expert-fetcher", 1, "read failed at offset 4096"}, DecodeControl, "control.Dead");
  RoundTrip(control::Stats{"tokenizer", {}}, DecodeControl, "control.Stats");
  RoundTrip(control::Stats{"trunk-reader", {{"read_mb_s", 3100.0}}}, DecodeControl, "control.Stats");
}

TEST(Protocol, WeightsRoundTrip) {
  RoundTrip(weights::LayerReady{92, 3, 18, 4096ull * 1000000, 2341216112ull}, DecodeWeights, "weights.LayerReady");
  RoundTrip(weights::LayerDone{5, 1, 7}, DecodeWeights, "weights.LayerDone");
  RoundTrip(weights::LayerFailed{7, weights::Error::kReadFailed, "model-00008: EIO"}, DecodeWeights,
            "weights.LayerFailed");
  RoundTrip(weights::LayerWant{0}, DecodeWeights, "weights.LayerWant");
  RoundTrip(weights::LayerWant{93}, DecodeWeights, "weights.LayerWant");
  // Trunk pieces (docs/trunk-pieces.md): the appended fields survive, and their defaults mean
  // "a whole layer" for a sender that does not set them.
  RoundTrip(weights::LayerReady{7, 2, 9, 0, 67104768ull, 5, 31}, DecodeWeights, "weights.LayerReady");
  RoundTrip(weights::LayerDone{7, 2, 9, 30}, DecodeWeights, "weights.LayerDone");
  RoundTrip(weights::LayerWant{7, 12}, DecodeWeights, "weights.LayerWant");
  {
    Encoded e = Encode(weights::LayerReady{1, 0, 1, 0, 1});
    auto kind = e.kind.bytes();
    const auto r = DecodeWeights(KindSpan(kind), e.payload);
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(std::get<weights::LayerReady>(r.value()).piece, 0);
    EXPECT_EQ(std::get<weights::LayerReady>(r.value()).pieces, 1);
  }
  RoundTrip(weights::EmbedRows{7, {0, 163839, 42, 42}}, DecodeWeights, "weights.EmbedRows");
  RoundTrip(weights::EmbedRows{8, {}}, DecodeWeights, "weights.EmbedRows");
  RoundTrip(weights::EmbedRowsReady{7, {1234, 8192 + 1234, 1ull << 33, 0}, 14336}, DecodeWeights,
            "weights.EmbedRowsReady");
}

TEST(Protocol, ExpertsRoundTrip) {
  RoundTrip(experts::ExpertRequest{11, 3, {895, 0, 17, 4}, experts::Priority::kPrefetch}, DecodeExperts,
            "experts.ExpertRequest");
  RoundTrip(experts::ExpertRequest{12, 1, {}, experts::Priority::kDemand}, DecodeExperts, "experts.ExpertRequest");
  RoundTrip(experts::ExpertReady{11, 3, 895, 40, 1ull << 40}, DecodeExperts, "experts.ExpertReady");
  RoundTrip(experts::ExpertRelease{3, 895, 40, 1ull << 40}, DecodeExperts, "experts.ExpertRelease");
  RoundTrip(experts::ExpertFailed{11, 3, 2, experts::Error::kBadChecksum, "xxh3 mismatch"}, DecodeExperts,
            "experts.ExpertFailed");
  RoundTrip(experts::ExpertBytes{11, 3, 2, 17547264, 0x0123456789abcdefull}, DecodeExperts, "experts.ExpertBytes");
}

TEST(Protocol, ComputeRoundTrip) {
  std::vector<int32_t> ids(5000);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(i * 31 % 163840);
  compute::Generate g1;
  g1.request_id = 1;
  g1.ids = ids;
  g1.gen = 16;
  g1.full_recompute = true;
  g1.prefill_chunk = 64;
  g1.stop_ids = {163586};
  RoundTrip(g1, DecodeCompute, "compute.Generate");
  RoundTrip(ATokenMessage(1, 42, 0), DecodeCompute, "compute.Token");
  RoundTrip(compute::Done{1, {5000, 16, 12.5, 0.75}, compute::StopReason::kStopId}, DecodeCompute, "compute.Done");
  compute::Generate g;
  g.request_id = 2;
  g.ids = {1, 2, 3};
  g.gen = 8;
  g.stop_ids = {7};
  g.keep_state = true;
  g.max_positions = 4096;
  g.sampling = {0.7f, 40, 0.9f, 0.05f, 1.1f, -1, 0.5f, 0.25f, 0xfedcba9876543210ull};
  g.logprobs = 5;
  g.perplexity = true;
  g.spec = 4;
  g.snapshot_at = 2;
  g.cache_partition = 0xfedcba9876543210ull;
  RoundTrip(g, DecodeCompute, "compute.Generate");
  g.constraint = compute::Constraint{R"({"type":"object"})", {5, 7}};
  RoundTrip(g, DecodeCompute, "compute.Generate");
  RoundTrip(compute::Token{2, 9, 3, -0.125f, {{9, -0.125f}, {4, -2.5f}}}, DecodeCompute, "compute.Token");
  RoundTrip(compute::Done{2, {3, 8, 1.5, 0.25, 11, 2, 3.75, 12, 9, 6}, compute::StopReason::kCancelled}, DecodeCompute,
            "compute.Done");
  RoundTrip(compute::Cancel{2}, DecodeCompute, "compute.Cancel");
  RoundTrip(compute::Ping{0x1234567890abcdefULL}, DecodeCompute, "compute.Ping");
  RoundTrip(compute::Pong{0xfedcba0987654321ULL}, DecodeCompute, "compute.Pong");
  RoundTrip(compute::StateOp{3, compute::StateAction::kLoad, "/tmp/a\xff.k3state", std::string("h\0i", 3)},
            DecodeCompute, "compute.StateOp");
  RoundTrip(compute::StateDone{3, false, "not a k3 state file", 11, {1, 2, 3}, "history"}, DecodeCompute,
            "compute.StateDone");
  RoundTrip(compute::Step{3, 67, 64, 0.5, 40, int64_t{5} << 33, 123456789, {7, 9, 11}}, DecodeCompute, "compute.Step");
}

TEST(Protocol, EveryTruncationRejected) {
  Encoded e = Encode(control::Ready{"compute", {{"a", 1}, {"b", 2}}});
  auto kind = e.kind.bytes();
  for (size_t n = 0; n < e.payload.size(); ++n) {
    std::vector<uint8_t> cut(e.payload.begin(), e.payload.begin() + static_cast<long>(n));
    auto r = DecodeControl(KindSpan(kind), cut);
    EXPECT_FALSE(r.ok()) << "prefix of " << n << " bytes accepted";
  }
  auto padded = e.payload;
  padded.insert(padded.end(), 4, 0);  // trailing bytes: the size prefix no longer matches
  EXPECT_FALSE(DecodeControl(KindSpan(kind), padded).ok());
}

TEST(Protocol, GarbageRejected) {
  std::mt19937 rng(7);
  const std::array<uint8_t, 2> kind{static_cast<uint8_t>(Protocol::kExperts), 1};
  int accepted = 0;
  for (int i = 0; i < 2000; ++i) {
    std::vector<uint8_t> junk(8 + rng() % 200);
    for (auto& b : junk) b = static_cast<uint8_t>(rng());
    accepted += DecodeExperts(KindSpan(kind), junk).ok();
  }
  EXPECT_EQ(accepted, 0);
}

TEST(Protocol, CorruptedBytesNeverCrash) {
  // Flip each byte of a valid message: the decoder must either reject it or return a value,
  // never read out of bounds (ASan build checks the latter).
  Encoded e = Encode(experts::ExpertRequest{11, 3, {1, 2, 3}, experts::Priority::kDemand});
  auto kind = e.kind.bytes();
  int rejected = 0;
  for (size_t i = 0; i < e.payload.size(); ++i) {
    auto bad = e.payload;
    bad[i] ^= 0xff;
    rejected += !DecodeExperts(KindSpan(kind), bad).ok();
  }
  EXPECT_GT(rejected, 0);
}

TEST(Protocol, OversizedRejected) {
  Encoded e = Encode(control::Shutdown{std::string(kMaxSmallPayload + 10, 'x')});
  auto kind = e.kind.bytes();
  auto r = DecodeControl(KindSpan(kind), e.payload);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().find("exceeds limit"), std::string::npos) << r.error();
}

TEST(Protocol, KindMustMatchPayload) {
  Encoded e = Encode(control::Dead{"compute", 1, "boom"});
  std::array<uint8_t, 2> lie = Encode(control::Hello{"x", 1}).kind.bytes();
  auto r = DecodeControl(KindSpan(lie), e.payload);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().find("control.Dead"), std::string::npos) << r.error();
  std::array<uint8_t, 3> long_kind{1, 4, 0};
  EXPECT_FALSE(DecodeControl({long_kind.data(), 3}, e.payload).ok());
}

TEST(Protocol, OtherProtocolRejected) {
  // A weights buffer given to the control decoder: kind frame and file identifier both differ.
  Encoded e = Encode(weights::LayerDone{1, 2, 3});
  auto kind = e.kind.bytes();
  EXPECT_FALSE(DecodeControl(KindSpan(kind), e.payload).ok());
  std::array<uint8_t, 2> relabelled{static_cast<uint8_t>(Protocol::kControl), kind[1]};
  auto r = DecodeControl(KindSpan(relabelled), e.payload);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().find("verification"), std::string::npos) << r.error();
}

TEST(Protocol, EnumOutOfRangeRejected) {
  Encoded e = Encode(experts::ExpertFailed{1, 2, 3, static_cast<experts::Error>(99), "?"});
  auto kind = e.kind.bytes();
  EXPECT_FALSE(DecodeExperts(KindSpan(kind), e.payload).ok());
  Encoded p = Encode(experts::ExpertRequest{1, 2, {3}, static_cast<experts::Priority>(2)});
  auto pk = p.kind.bytes();
  EXPECT_FALSE(DecodeExperts(KindSpan(pk), p.payload).ok());
  // The retired StaleGeneration (3) sits inside the enum's range: still refused.
  Encoded g = Encode(experts::ExpertFailed{1, 2, 3, static_cast<experts::Error>(3), "?"});
  auto gk = g.kind.bytes();
  EXPECT_FALSE(DecodeExperts(KindSpan(gk), g.payload).ok());
  Encoded w = Encode(weights::LayerFailed{1, static_cast<weights::Error>(3), "?"});
  auto wk = w.kind.bytes();
  EXPECT_FALSE(DecodeWeights(KindSpan(wk), w.payload).ok());
  Encoded d = Encode(compute::Done{1, {}, static_cast<compute::StopReason>(4)});
  auto dk = d.kind.bytes();
  EXPECT_FALSE(DecodeCompute(KindSpan(dk), d.payload).ok());
  compute::StateOp op;
  op.action = static_cast<compute::StateAction>(3);
  Encoded o = Encode(op);
  auto ok = o.kind.bytes();
  EXPECT_FALSE(DecodeCompute(KindSpan(ok), o.payload).ok());
}

TEST(Protocol, MisalignedPayloadStillDecodes) {
  Encoded e = Encode(weights::LayerReady{1, 2, 4, 8, 16});
  std::vector<uint8_t> storage(e.payload.size() + 1);
  std::memcpy(storage.data() + 1, e.payload.data(), e.payload.size());
  auto kind = e.kind.bytes();
  auto r = DecodeWeights(KindSpan(kind), {storage.data() + 1, e.payload.size()});
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_EQ(std::get<weights::LayerReady>(r.value()), (weights::LayerReady{1, 2, 4, 8, 16}));
}

TEST(Protocol, ExpertChecksum) {
  std::vector<uint8_t> bytes(100000);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 7 + 3);
  experts::ExpertBytes h{1, 2, 3, bytes.size(), ExpertChecksum(bytes)};
  EXPECT_TRUE(ExpertBytesMatch(h, bytes));
  bytes[5000] ^= 1;
  EXPECT_FALSE(ExpertBytesMatch(h, bytes));
  bytes[5000] ^= 1;
  EXPECT_FALSE(ExpertBytesMatch(h, std::span<const uint8_t>(bytes).first(bytes.size() - 1)));
  EXPECT_NE(ExpertChecksum(std::span<const uint8_t>(bytes).first(10)), ExpertChecksum(bytes));
}

TEST(Protocol, KindNameOfBadKindIsSafe) {
  EXPECT_EQ(KindName(Kind{Protocol::kControl, 0}).substr(0, 4), "<bad");
  EXPECT_EQ(KindName(Kind{Protocol::kControl, 200}).substr(0, 4), "<bad");
  EXPECT_EQ(KindName(Kind{static_cast<Protocol>(77), 1}).substr(0, 4), "<bad");
}

}  // namespace
}  // namespace k3::ipc
