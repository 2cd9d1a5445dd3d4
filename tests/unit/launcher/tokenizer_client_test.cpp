// The launcher's tokenizer client against a ROUTER standing in for the service: a Failed reply
// ends the stream and its error kind and detail become the failure (Failed.error is read).
#include "launcher/tokenizer_client.h"

#include <gtest/gtest.h>

#include <chrono>

#include "common/ipc/protocol.h"

namespace k3::launch {
namespace {

namespace tk = ipc::tokenizer;

TEST(TokenizerClient, FailedReplyNamesItsErrorKind) {
  zmq::context_t ctx;
  zmq::socket_t service(ctx, zmq::socket_type::router);
  service.set(zmq::sockopt::linger, 0);
  service.bind("inproc://tokenizer-client-test");
  TokenizerClient client(ctx, "inproc://tokenizer-client-test");
  client.PushIds({4000});
  ipc::RejectCounter rejects;
  const auto deadline = ipc::Clock::now() + std::chrono::seconds(5);
  auto req = ipc::ReceiveVerified(service, true, ipc::DecodeTokenizer, deadline, rejects);
  ASSERT_TRUE(req.has_value());
  const auto* d = std::get_if<tk::Decode>(&req->message);
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->ids, std::vector<int32_t>({4000}));
  ipc::SendMessage(service, ipc::Encode(tk::Failed{d->request_id, tk::Error::kUnknownId, "id 4000"}), {},
                   req->identity);
  while (client.failure().empty() && ipc::Clock::now() < deadline) {
    ipc::PollIn(client.socket(), deadline);
    client.Drain(rejects);
  }
  EXPECT_EQ(client.failure(), "unknown id: id 4000");
  EXPECT_EQ(rejects.rejected, 0u);
}

}  // namespace
}  // namespace k3::launch
