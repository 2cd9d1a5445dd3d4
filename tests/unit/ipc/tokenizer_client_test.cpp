// The tokenizer clients against a ROUTER standing in for the service: a Failed reply ends the
// stream and its error kind and detail become the failure (Failed.error is read); pending
// requests go again under their id after a restart or a timeout, answered ones never.
#include "common/ipc/tokenizer_client.h"

#include <gtest/gtest.h>

#include <chrono>

#include "common/ipc/protocol.h"

namespace k3::ipc {
namespace {

namespace tk = tokenizer;

TEST(TokenizerClient, FailedReplyNamesItsErrorKind) {
  zmq::context_t ctx;
  zmq::socket_t service(ctx, zmq::socket_type::router);
  service.set(zmq::sockopt::linger, 0);
  service.bind("inproc://tokenizer-client-test");
  TokenizerClient client(ctx, "inproc://tokenizer-client-test");
  client.PushIds({4000});
  RejectCounter rejects;
  const auto deadline = Clock::now() + std::chrono::seconds(5);
  auto req = ReceiveVerified(service, true, DecodeTokenizer, deadline, rejects);
  ASSERT_TRUE(req.has_value());
  const auto* d = std::get_if<tk::Decode>(&req->message);
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->ids, std::vector<int32_t>({4000}));
  SendMessage(service, Encode(tk::Failed{d->request_id, tk::Error::kUnknownId, "id 4000"}), {},
                   req->identity);
  while (client.failure().empty() && Clock::now() < deadline) {
    PollIn(client.socket(), deadline);
    client.Drain(rejects);
  }
  EXPECT_EQ(client.failure(), "unknown id: id 4000");
  EXPECT_EQ(rejects.rejected, 0u);
}

// What the service received within `wait`: the request ids of every message.
std::vector<uint64_t> ReceivedIds(zmq::socket_t& service, std::chrono::milliseconds wait) {
  std::vector<uint64_t> ids;
  RejectCounter rejects;
  const auto deadline = Clock::now() + wait;
  while (auto req = ReceiveVerified(service, true, DecodeTokenizer, deadline, rejects))
    ids.push_back(std::visit([](const auto& m) { return m.request_id; }, req->message));
  return ids;
}

TEST(TokenizerRequests, PendingOnesGoAgainUnderTheirIdAfterARestartOrATimeout) {
  zmq::context_t ctx;
  zmq::socket_t service(ctx, zmq::socket_type::router), client(ctx, zmq::socket_type::dealer);
  service.set(zmq::sockopt::linger, 0);
  client.set(zmq::sockopt::linger, 0);
  service.bind("inproc://tokenizer-requests-test");
  client.connect("inproc://tokenizer-requests-test");
  TokenizerRequests req(client);
  using R = TokenizerRequests::Resend;
  auto encode = [](const char* text) {
    return [text](uint64_t id) { return Encode(tk::Encode{id, text, false}); };
  };
  const uint64_t never = req.Send(encode("a"), R::kNever);
  const uint64_t restart = req.Send(encode("b"), R::kOnRestart);
  const uint64_t timed = req.Send(encode("c"), R::kOnRestartOrTimeout);
  const uint64_t answered = req.Send(encode("d"), R::kOnRestartOrTimeout);
  EXPECT_EQ(ReceivedIds(service, std::chrono::milliseconds(200)),
            std::vector<uint64_t>({never, restart, timed, answered}));
  EXPECT_TRUE(req.Answered(answered));
  EXPECT_FALSE(req.Answered(answered));  // a resend's second answer
  EXPECT_FALSE(req.Answered(99));        // no such request

  req.Restarted();
  EXPECT_EQ(ReceivedIds(service, std::chrono::milliseconds(200)), std::vector<uint64_t>({restart, timed}));
  req.ResendStale(Clock::now());  // just sent: not stale
  EXPECT_TRUE(ReceivedIds(service, std::chrono::milliseconds(100)).empty());
  req.ResendStale(Clock::now() + kTokenizerResend + std::chrono::seconds(1));
  EXPECT_EQ(ReceivedIds(service, std::chrono::milliseconds(200)), std::vector<uint64_t>({timed}));
  req.Forget(timed);
  req.ResendStale(Clock::now() + 2 * kTokenizerResend + std::chrono::seconds(1));
  EXPECT_TRUE(ReceivedIds(service, std::chrono::milliseconds(100)).empty());
  EXPECT_TRUE(req.Pending(never) && req.Pending(restart) && !req.Pending(timed));
}

// A message the service would drop (over its 16 MiB payload limit, protocol.h) is never sent
// and never pending: the caller learns it at once instead of waiting for a reply.
TEST(TokenizerRequests, AMessageOverThePayloadLimitIsNotSent) {
  zmq::context_t ctx;
  zmq::socket_t service(ctx, zmq::socket_type::router), client(ctx, zmq::socket_type::dealer);
  service.set(zmq::sockopt::linger, 0);
  client.set(zmq::sockopt::linger, 0);
  service.bind("inproc://tokenizer-requests-limit-test");
  client.connect("inproc://tokenizer-requests-limit-test");
  TokenizerRequests req(client);
  const std::string big(16u << 20 | 8192, 'x');  // 16 MiB + 8 KiB of text: past 16 MiB + 4 KiB
  const uint64_t id = req.Send([&](uint64_t i) { return Encode(tk::Encode{i, big, false}); },
                               TokenizerRequests::Resend::kOnRestartOrTimeout);
  EXPECT_EQ(id, 0u);
  const std::string fits(16u << 20, 'x');  // 16 MiB of text and the message's framing: within
  const uint64_t ok = req.Send([&](uint64_t i) { return Encode(tk::Encode{i, fits, false}); },
                               TokenizerRequests::Resend::kOnRestartOrTimeout);
  EXPECT_NE(ok, 0u);
  EXPECT_TRUE(req.Pending(ok));
  EXPECT_EQ(ReceivedIds(service, std::chrono::milliseconds(500)), std::vector<uint64_t>({ok}));
}

// The launcher's encode lost in a tokenizer restart: Resend() sends it again and its answer is taken.
TEST(TokenizerClient, EncodeLostInARestartIsSentAgain) {
  zmq::context_t ctx;
  zmq::socket_t service(ctx, zmq::socket_type::router);
  service.set(zmq::sockopt::linger, 0);
  service.bind("inproc://tokenizer-client-resend");
  TokenizerClient client(ctx, "inproc://tokenizer-client-resend");
  client.StartEncode("hello");
  RejectCounter rejects;
  const auto deadline = Clock::now() + std::chrono::seconds(5);
  auto first = ReceiveVerified(service, true, DecodeTokenizer, deadline, rejects);
  ASSERT_TRUE(first.has_value());
  client.Resend();  // the service restarted: the first request is lost
  auto again = ReceiveVerified(service, true, DecodeTokenizer, deadline, rejects);
  ASSERT_TRUE(again.has_value());
  const auto* e = std::get_if<tk::Encode>(&again->message);
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->text, "hello");
  SendMessage(service, Encode(tk::EncodedIds{e->request_id, {5, 6}}), {}, again->identity);
  while (!client.encoded() && Clock::now() < deadline) {
    PollIn(client.socket(), deadline);
    client.Drain(rejects);
  }
  ASSERT_TRUE(client.encoded().has_value());
  EXPECT_EQ(*client.encoded(), std::vector<int32_t>({5, 6}));
}

}  // namespace
}  // namespace k3::ipc
