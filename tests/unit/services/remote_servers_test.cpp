// RemoteReads with several expert servers, each a ROUTER socket in the test: reads go to the
// expert's home server, spread evenly over the others in a burst, move to a live server when
// one is silent (dropped) or answers with an error, and fail only when no server is left, with
// one line naming them all.
#include <gtest/gtest.h>

#include <chrono>
#include <map>
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

class RemoteServersTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (int i = 0; i < 3; ++i) {
      servers_.emplace_back(ctx_, zmq::socket_type::router);
      servers_.back().set(zmq::sockopt::linger, 0);
      servers_.back().bind(Endpoint(i));
    }
  }
  static std::string Endpoint(int i) { return "inproc://expert-server-" + std::to_string(i); }
  svc::RemoteReads Reads(int in_flight, std::chrono::milliseconds drop_after = 10000ms,
                         std::chrono::milliseconds give_up = 30000ms) {
    svc::RemoteReadsOptions o;
    o.in_flight = in_flight;
    o.resend = 10000ms;
    o.give_up = give_up;
    o.drop_after = drop_after;
    return svc::RemoteReads(ctx_, {Endpoint(0), Endpoint(1), Endpoint(2)}, o);
  }
  // Requests that reached server i within `wait`.
  std::vector<ipc::Received<x::Message>> Requests(int i, std::chrono::milliseconds wait = 200ms) {
    std::vector<ipc::Received<x::Message>> out;
    ipc::RejectCounter rejects;
    while (auto m = ipc::ReceiveVerified(servers_[static_cast<size_t>(i)], true, ipc::DecodeExperts,
                                         ipc::Clock::now() + wait, rejects))
      out.push_back(std::move(*m));
    return out;
  }
  void Answer(int i, const ipc::Received<x::Message>& req) {
    const auto& q = std::get<x::ExpertRequest>(req.message);
    ipc::SendMessage(servers_[static_cast<size_t>(i)],
                     ipc::Encode(x::ExpertBytes{q.request_id, q.layer, q.experts.at(0), bytes_.size(),
                                                ipc::ExpertChecksum(bytes_)}),
                     bytes_, req.identity);
  }
  std::vector<svc::ReadDone> Collect(svc::RemoteReads& r, size_t n, std::chrono::milliseconds wait = 3000ms) {
    std::vector<svc::ReadDone> done;
    const auto deadline = ipc::Clock::now() + wait;
    while (done.size() < n && ipc::Clock::now() < deadline) {
      for (auto& d : r.TakeCompleted()) done.push_back(std::move(d));
      std::this_thread::sleep_for(5ms);
    }
    return done;
  }
  // Takes completions until `n` arrived (or 3 s passed) while servers [first, last] answer every
  // request they get (each a layer-1 expert).
  std::vector<svc::ReadDone> Serve(svc::RemoteReads& r, size_t n, int first, int last) {
    std::vector<svc::ReadDone> done;
    const auto deadline = ipc::Clock::now() + 3s;
    while (done.size() < n && ipc::Clock::now() < deadline) {
      for (auto& d : r.TakeCompleted()) done.push_back(std::move(d));
      for (int s = first; s <= last; ++s)
        for (auto& q : Requests(s, 5ms)) {
          EXPECT_EQ(std::get<x::ExpertRequest>(q.message).layer, 1);
          Answer(s, q);
        }
    }
    return done;
  }
  // Experts of layer 1 whose home among 3 servers is `home`.
  static std::vector<int> HomedAt(size_t home, size_t count) {
    std::vector<int> out;
    for (int e = 0; out.size() < count; ++e)
      if (svc::RemoteReads::HomeServer(1, e, 3) == home) out.push_back(e);
    return out;
  }

  zmq::context_t ctx_;
  std::vector<zmq::socket_t> servers_;
  std::vector<uint8_t> bytes_ = [] {
    std::vector<uint8_t> b(3000);
    std::iota(b.begin(), b.end(), 11);
    return b;
  }();
  std::vector<uint8_t> slots_ = std::vector<uint8_t>(64 * 3000, 0);
  uint8_t* Slot(int i) { return slots_.data() + static_cast<size_t>(i) * bytes_.size(); }
};

TEST(HomeServer, StableAndSpread) {
  std::map<size_t, int> count;
  for (int l = 1; l < 61; ++l)
    for (int e = 0; e < 384; ++e) {
      const size_t h = svc::RemoteReads::HomeServer(l, e, 3);
      ASSERT_LT(h, 3u);
      EXPECT_EQ(h, svc::RemoteReads::HomeServer(l, e, 3));
      ++count[h];
    }
  for (const auto& [server, n] : count) {
    EXPECT_GT(n, 60 * 384 / 3 * 9 / 10) << "server " << server;
    EXPECT_LT(n, 60 * 384 / 3 * 11 / 10) << "server " << server;
  }
  EXPECT_EQ(svc::RemoteReads::HomeServer(7, 9, 1), 0u);
}

TEST_F(RemoteServersTest, ReadsGoHomeThenSpreadEvenly) {
  svc::RemoteReads r = Reads(2);
  // With every server idle, an expert goes to its home.
  const std::vector<int> e = HomedAt(1, 7);
  r.Submit(0, 1, e[0], Slot(0), bytes_.size());
  auto first = Requests(1);
  ASSERT_EQ(first.size(), 1u);
  EXPECT_EQ(std::get<x::ExpertRequest>(first[0].message).experts.at(0), e[0]);
  EXPECT_TRUE(Requests(0, 50ms).empty() && Requests(2, 50ms).empty());
  Answer(1, first[0]);
  ASSERT_EQ(Collect(r, 1).size(), 1u);
  // A burst of six experts, all homed at server 1, is spread two by two; a seventh waits
  // (two in flight per server).
  for (int i = 1; i < 7; ++i) r.Submit(static_cast<uint64_t>(i), 1, e[static_cast<size_t>(i)], Slot(i), bytes_.size());
  std::vector<std::vector<ipc::Received<x::Message>>> at;
  for (int s = 0; s < 3; ++s) {
    at.push_back(Requests(s));
    EXPECT_EQ(at.back().size(), 2u) << "server " << s;
  }
  r.Submit(7, 1, e[0], Slot(7), bytes_.size());
  for (int s = 0; s < 3; ++s) EXPECT_TRUE(Requests(s, 50ms).empty()) << "more than 2 reads out at server " << s;
  for (int s = 0; s < 3; ++s)
    for (auto& q : at[static_cast<size_t>(s)]) Answer(s, q);
  const auto done = Serve(r, 7, 0, 2);
  ASSERT_EQ(done.size(), 7u);
  for (const auto& d : done) EXPECT_EQ(d.error, "");
  for (int i = 0; i < 8; ++i) EXPECT_TRUE(std::equal(bytes_.begin(), bytes_.end(), Slot(i))) << i;
  const auto st = r.stats();
  ASSERT_EQ(st.size(), 3u);
  EXPECT_EQ(st[0].experts + st[1].experts + st[2].experts, 8u);
  EXPECT_GE(st[1].experts, 3u);
  EXPECT_GE(st[0].experts, 2u);
  EXPECT_GE(st[2].experts, 2u);
  EXPECT_EQ(st[0].bytes, st[0].experts * bytes_.size());
  EXPECT_GT(st[1].seconds, 0.0);
  EXPECT_EQ(st[1].endpoint, Endpoint(1));
}

TEST_F(RemoteServersTest, SilentServerIsDroppedAndItsReadsMove) {
  svc::RemoteReads r = Reads(4, 500ms);
  const std::vector<int> e = HomedAt(2, 3);
  for (int i = 0; i < 3; ++i) r.Submit(static_cast<uint64_t>(i), 1, e[static_cast<size_t>(i)], Slot(i), bytes_.size());
  const size_t at2 = Requests(2, 50ms).size();  // server 2 never answers
  ASSERT_GE(at2, 1u);
  const auto done = Serve(r, 3, 0, 1);
  ASSERT_EQ(done.size(), 3u);
  for (const auto& d : done) EXPECT_EQ(d.error, "");
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(std::equal(bytes_.begin(), bytes_.end(), Slot(i)));
  const auto st = r.stats();
  EXPECT_TRUE(st[2].dropped);
  EXPECT_EQ(st[2].moved, at2);
  EXPECT_EQ(st[2].experts, 0u);
  EXPECT_EQ(st[0].experts + st[1].experts, 3u);
  EXPECT_FALSE(st[0].dropped || st[1].dropped);
  // A dropped server is asked nothing more.
  r.Submit(9, 1, e[0], Slot(9), bytes_.size());
  EXPECT_TRUE(Requests(2, 100ms).empty());
}

TEST_F(RemoteServersTest, ErrorReplyGoesToAnotherServer) {
  svc::RemoteReads r = Reads(4);
  const int e = HomedAt(0, 1)[0];
  r.Submit(5, 1, e, Slot(0), bytes_.size());
  auto at0 = Requests(0);
  ASSERT_EQ(at0.size(), 1u);
  const auto& q = std::get<x::ExpertRequest>(at0[0].message);
  ipc::SendMessage(servers_[0], ipc::Encode(x::ExpertFailed{q.request_id, 1, e, x::Error::kReadFailed, "disk on fire"}),
                   {}, at0[0].identity);
  const auto done = Serve(r, 1, 1, 2);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].error, "");
  EXPECT_EQ(r.stats()[0].failures, 1u);
  EXPECT_FALSE(r.stats()[0].dropped) << "an error reply is an answer, not silence";
}

TEST_F(RemoteServersTest, ReadUnansweredPastTheTimeoutGoesElsewhere) {
  svc::RemoteReads r = Reads(4, 10000ms, 300ms);  // drop later than give up: only this read moves
  const int e = HomedAt(0, 1)[0];
  r.Submit(1, 1, e, Slot(0), bytes_.size());
  ASSERT_EQ(Requests(0, 50ms).size(), 1u);  // never answered
  const auto done = Serve(r, 1, 1, 2);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].error, "");
  EXPECT_TRUE(std::equal(bytes_.begin(), bytes_.end(), Slot(0)));
  const auto st = r.stats();
  EXPECT_EQ(st[0].failures, 1u);
  EXPECT_FALSE(st[0].dropped);
  EXPECT_EQ(st[1].experts + st[2].experts, 1u);
}

TEST_F(RemoteServersTest, NoServerLeftFailsNamingThemAll) {
  svc::RemoteReads r = Reads(4, 100ms, 600ms);
  r.Submit(3, 1, 0, Slot(0), bytes_.size());
  auto done = Collect(r, 1, 5000ms);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].tag, 3u);
  const std::string& e = done[0].error;
  for (int i = 0; i < 3; ++i) EXPECT_NE(e.find(Endpoint(i)), std::string::npos) << e;
  EXPECT_NE(e.find("did not answer within 0.6 s"), std::string::npos) << e;
  EXPECT_NE(e.find("dropped after 0.1 s of silence"), std::string::npos) << e;
  size_t dropped = 0;
  for (const auto& s : r.stats()) dropped += s.dropped;
  EXPECT_EQ(dropped, 2u) << "the last live server is never dropped";
}

}  // namespace
}  // namespace k3::test
