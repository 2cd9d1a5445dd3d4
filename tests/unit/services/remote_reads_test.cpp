// RemoteReads (the fetcher's reads from a k3-expert-server) against a ROUTER socket in the
// test playing the server: bytes land where asked, bad bytes and silence become one-line
// errors, and an unanswered request is sent again with the same id. Several servers: see
// remote_servers_test.cpp.
#include <gtest/gtest.h>

#include <chrono>
#include <numeric>
#include <thread>
#include <vector>

#include "common/ipc/protocol.h"
#include "common/ipc/zmq_channel.h"
#include "services/expert_fetcher/remote_reads.h"

namespace k3::test {
namespace {

namespace x = ipc::experts;
using namespace std::chrono_literals;

class RemoteReadsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_.set(zmq::sockopt::linger, 0);
    server_.bind("inproc://expert-server");
  }
  // The next request the fake server receives (fails the test after 2 s).
  ipc::Received<x::Message> NextRequest() {
    ipc::RejectCounter rejects;
    auto m = ipc::ReceiveVerified(server_, true, ipc::DecodeExperts, ipc::Clock::now() + 2s, rejects);
    EXPECT_TRUE(m.has_value()) << "no request reached the server";
    return m ? std::move(*m) : ipc::Received<x::Message>{};
  }
  // Polls `r` until it reports a completion (or 2 s pass).
  std::vector<svc::ReadDone> Wait(svc::RemoteReads& r) {
    const auto deadline = ipc::Clock::now() + 2s;
    while (ipc::Clock::now() < deadline) {
      auto done = r.TakeCompleted();
      if (!done.empty()) return done;
      std::this_thread::sleep_for(5ms);
    }
    return {};
  }
  void Answer(const ipc::Received<x::Message>& req, const std::vector<uint8_t>& bytes, uint64_t checksum) {
    const auto& q = std::get<x::ExpertRequest>(req.message);
    ipc::SendMessage(server_, ipc::Encode(x::ExpertBytes{q.request_id, q.layer, q.experts.at(0), bytes.size(), checksum}),
                     bytes, req.identity);
  }

  svc::RemoteReads Reads(int in_flight = 4, std::chrono::milliseconds resend = 2000ms,
                         std::chrono::milliseconds give_up = 30000ms) {
    svc::RemoteReadsOptions o;
    o.in_flight = in_flight;
    o.resend = resend;
    o.give_up = give_up;
    return svc::RemoteReads(ctx_, {"inproc://expert-server"}, o);
  }

  zmq::context_t ctx_;
  zmq::socket_t server_{ctx_, zmq::socket_type::router};
  std::vector<uint8_t> bytes_ = [] {
    std::vector<uint8_t> b(5000);
    std::iota(b.begin(), b.end(), 7);
    return b;
  }();
};

TEST_F(RemoteReadsTest, BytesLandWhereAsked) {
  svc::RemoteReads r = Reads();
  std::vector<uint8_t> slot(bytes_.size() + 100, 0);
  r.Submit(42, 3, 17, slot.data() + 100, bytes_.size());
  auto req = NextRequest();
  const auto& q = std::get<x::ExpertRequest>(req.message);
  EXPECT_EQ(q.layer, 3);
  EXPECT_EQ(q.experts, std::vector<int32_t>{17});
  Answer(req, bytes_, ipc::ExpertChecksum(bytes_));
  auto done = Wait(r);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].tag, 42u);
  EXPECT_EQ(done[0].bytes, bytes_.size());
  EXPECT_EQ(done[0].error, "");
  EXPECT_TRUE(std::equal(bytes_.begin(), bytes_.end(), slot.begin() + 100));
  EXPECT_EQ(slot[99], 0) << "nothing written before the expert's first byte";
  EXPECT_EQ(r.pending(), 0u);
}

TEST_F(RemoteReadsTest, BadChecksumOrLengthIsAnError) {
  svc::RemoteReads r = Reads();
  std::vector<uint8_t> slot(bytes_.size(), 0);
  r.Submit(1, 3, 17, slot.data(), bytes_.size());
  Answer(NextRequest(), bytes_, ipc::ExpertChecksum(bytes_) ^ 1);
  r.Submit(2, 3, 18, slot.data(), bytes_.size() + 1);  // the server's copy is one byte shorter
  Answer(NextRequest(), bytes_, ipc::ExpertChecksum(bytes_));
  std::vector<svc::ReadDone> done;
  for (int i = 0; i < 2 && done.size() < 2; ++i)
    for (auto& d : Wait(r)) done.push_back(d);
  ASSERT_EQ(done.size(), 2u);
  for (const auto& d : done) {
    EXPECT_NE(d.error.find("fail their length or XXH3 check"), std::string::npos) << d.error;
    EXPECT_TRUE(d.corrupt);
    EXPECT_EQ(d.bytes, 0u);
  }
  EXPECT_TRUE(std::all_of(slot.begin(), slot.end(), [](uint8_t b) { return b == 0; })) << "bad bytes were copied";
}

TEST_F(RemoteReadsTest, UnansweredRequestIsSentAgainThenGivenUp) {
  svc::RemoteReads r = Reads(4, 50ms, 400ms);
  std::vector<uint8_t> slot(bytes_.size(), 0);
  r.Submit(9, 4, 2, slot.data(), bytes_.size());
  auto first = NextRequest();  // lost: no answer
  const uint64_t id = std::get<x::ExpertRequest>(first.message).request_id;
  std::this_thread::sleep_for(80ms);
  EXPECT_TRUE(r.TakeCompleted().empty());
  auto again = NextRequest();
  EXPECT_EQ(std::get<x::ExpertRequest>(again.message).request_id, id) << "the resend keeps its id";
  EXPECT_GE(r.resends(), 1u);
  Answer(again, bytes_, ipc::ExpertChecksum(bytes_));
  auto done = Wait(r);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].error, "");
  // A second read that nobody answers fails after the give-up time, with a one-line reason.
  r.Submit(10, 4, 3, slot.data(), bytes_.size());
  done = Wait(r);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].tag, 10u);
  EXPECT_EQ(done[0].error, "expert server inproc://expert-server did not answer within 0.4 s");
}

// At most `in_flight` requests are out; the next goes when one is answered.
TEST_F(RemoteReadsTest, AtMostInFlightRequestsAreOut) {
  svc::RemoteReads r = Reads(2);
  std::vector<uint8_t> slots(3 * bytes_.size(), 0);
  for (int i = 0; i < 3; ++i) r.Submit(static_cast<uint64_t>(i), 1, i, slots.data() + i * bytes_.size(), bytes_.size());
  EXPECT_EQ(r.pending(), 3u);
  auto a = NextRequest();
  auto b = NextRequest();
  ipc::RejectCounter rejects;
  EXPECT_FALSE(ipc::ReceiveVerified(server_, true, ipc::DecodeExperts, ipc::Clock::now() + 100ms, rejects))
      << "a third request went out while two were unanswered";
  Answer(a, bytes_, ipc::ExpertChecksum(bytes_));
  ASSERT_EQ(Wait(r).size(), 1u);
  auto c = NextRequest();
  EXPECT_EQ(std::get<x::ExpertRequest>(c.message).experts, std::vector<int32_t>{2});
  Answer(b, bytes_, ipc::ExpertChecksum(bytes_));
  Answer(c, bytes_, ipc::ExpertChecksum(bytes_));
  size_t n = 0;
  for (int i = 0; i < 2 && n < 2; ++i) n += Wait(r).size();
  EXPECT_EQ(n, 2u);
  EXPECT_EQ(r.pending(), 0u);
  EXPECT_TRUE(std::equal(bytes_.begin(), bytes_.end(), slots.begin() + 2 * bytes_.size()));
}

TEST_F(RemoteReadsTest, ServerFailureIsPassedOn) {
  svc::RemoteReads r = Reads();
  std::vector<uint8_t> slot(16);
  r.Submit(5, 1, 0, slot.data(), slot.size());
  auto req = NextRequest();
  const auto& q = std::get<x::ExpertRequest>(req.message);
  ipc::SendMessage(server_, ipc::Encode(x::ExpertFailed{q.request_id, 1, 0, x::Error::kReadFailed, "disk on fire"}), {},
                   req.identity);
  auto done = Wait(r);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].error, "expert server inproc://expert-server: disk on fire");
}

}  // namespace
}  // namespace k3::test
