// Real ipc:// sockets between two threads: good messages arrive verified, a malformed one is
// rejected and counted while the next good one is still processed, bulk frames travel intact.
#include "common/ipc/zmq_channel.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <thread>

#include "tests/unit/ipc/token_message.h"

namespace k3::ipc {
namespace {

std::string Endpoint(const char* tag) { return "ipc:///tmp/k3-test-" + std::to_string(::getpid()) + "-" + tag; }

Clock::time_point In(int ms) { return Clock::now() + std::chrono::milliseconds(ms); }

TEST(ZmqChannel, DealerToRouterWithRejects) {
  zmq::context_t ctx;
  zmq::socket_t router(ctx, zmq::socket_type::router);
  router.set(zmq::sockopt::linger, 0);
  const std::string ep = Endpoint("router");
  router.bind(ep);

  std::thread peer([&] {
    zmq::socket_t dealer(ctx, zmq::socket_type::dealer);
    dealer.set(zmq::sockopt::routing_id, "trunk-reader");
    dealer.set(zmq::sockopt::linger, 1000);
    dealer.connect(ep);
    SendMessage(dealer, Encode(control::Hello{"trunk-reader", 77}));
    // Garbage payload under a valid kind frame.
    const std::array<uint8_t, 2> kind = Encode(control::Hello{}).kind.bytes();
    std::vector<uint8_t> junk(40, 0xEE);
    dealer.send(zmq::buffer(kind.data(), 2), zmq::send_flags::sndmore);
    dealer.send(zmq::buffer(junk), zmq::send_flags::none);
    // A lone frame (no payload).
    dealer.send(zmq::str_buffer("x"), zmq::send_flags::none);
    // Truncated good message.
    Encoded ready = Encode(control::Ready{"trunk-reader", {{"rss_bytes", 1}}});
    dealer.send(zmq::buffer(kind.data(), 2), zmq::send_flags::sndmore);
    dealer.send(zmq::buffer(ready.payload.data(), ready.payload.size() / 2), zmq::send_flags::none);
    // Then a good one, which must still get through.
    SendMessage(dealer, ready);
  });

  RejectCounter rejects;
  auto hello = ReceiveVerified(router, true, DecodeControl, In(5000), rejects);
  ASSERT_TRUE(hello.has_value());
  EXPECT_EQ(hello->identity, "trunk-reader");
  EXPECT_EQ(std::get<control::Hello>(hello->message), (control::Hello{"trunk-reader", 77}));
  EXPECT_EQ(rejects.rejected, 0u);

  auto ready = ReceiveVerified(router, true, DecodeControl, In(5000), rejects);
  ASSERT_TRUE(ready.has_value());
  EXPECT_EQ(std::get<control::Ready>(ready->message).stats.size(), 1u);
  EXPECT_EQ(rejects.rejected, 3u) << rejects.last_reason;
  EXPECT_FALSE(rejects.last_reason.empty());
  peer.join();

  // Nothing more: the deadline is honoured.
  auto t0 = Clock::now();
  EXPECT_FALSE(ReceiveVerified(router, true, DecodeControl, In(100), rejects).has_value());
  EXPECT_GE(Clock::now() - t0, std::chrono::milliseconds(90));
  ::unlink(ep.substr(6).c_str());
}

TEST(ZmqChannel, PushPullBulkFrameWithChecksum) {
  zmq::context_t ctx;
  zmq::socket_t pull(ctx, zmq::socket_type::pull);
  pull.set(zmq::sockopt::linger, 0);
  const std::string ep = Endpoint("bulk");
  pull.bind(ep);
  std::vector<uint8_t> bytes(1 << 20);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i ^ (i >> 8));

  std::thread peer([&] {
    zmq::socket_t push(ctx, zmq::socket_type::push);
    push.set(zmq::sockopt::linger, 1000);
    push.connect(ep);
    experts::ExpertBytes h{9, 4, 100, bytes.size(), ExpertChecksum(bytes)};
    SendMessage(push, Encode(h), bytes);
    auto corrupt = bytes;
    corrupt[777] ^= 0x40;
    SendMessage(push, Encode(h), corrupt);  // header no longer matches the bytes
  });

  RejectCounter rejects;
  for (int i = 0; i < 2; ++i) {
    auto got = ReceiveVerified(pull, false, DecodeExperts, In(5000), rejects);
    ASSERT_TRUE(got.has_value());
    const auto& h = std::get<experts::ExpertBytes>(got->message);
    EXPECT_EQ(h.expert, 100);
    EXPECT_EQ(got->bulk().size(), bytes.size());
    EXPECT_EQ(ExpertBytesMatch(h, got->bulk()), i == 0) << "message " << i;
  }
  peer.join();
  ::unlink(ep.substr(6).c_str());
}

TEST(ZmqChannel, WrongProtocolCounted) {
  zmq::context_t ctx;
  zmq::socket_t pull(ctx, zmq::socket_type::pull);
  pull.set(zmq::sockopt::linger, 0);
  const std::string ep = Endpoint("proto");
  pull.bind(ep);
  zmq::socket_t push(ctx, zmq::socket_type::push);
  push.set(zmq::sockopt::linger, 1000);
  push.connect(ep);
  SendMessage(push, Encode(ATokenMessage(1, 2, 3)));  // not a weights message
  SendMessage(push, Encode(weights::LayerDone{4, 5, 6}));
  RejectCounter rejects;
  auto got = ReceiveVerified(pull, false, DecodeWeights, In(5000), rejects);
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(std::get<weights::LayerDone>(got->message), (weights::LayerDone{4, 5, 6}));
  EXPECT_EQ(rejects.rejected, 1u);
  ::unlink(ep.substr(6).c_str());
}

}  // namespace
}  // namespace k3::ipc
