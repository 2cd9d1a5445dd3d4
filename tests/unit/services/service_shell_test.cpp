// The lifecycle every pipeline service runs on (common/service/service_shell.h), driven
// in-process: the launcher's end is a real ROUTER on an inproc endpoint, the service's a real
// ControlLink, and the messages are decoded as the launcher decodes them.
#include "common/service/service_shell.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <stdexcept>
#include <string>
#include <variant>
#include <vector>

#include "common/run_main.h"

namespace k3::svc {
namespace {

using ipc::control::Stat;

// What a test service is told to do, and what the lifecycle made of it.
struct Script {
  bool throw_in_start = false, throw_in_serve = false, runtime_error = false, stdout_closed = false;
  bool interrupted = false;
  std::vector<std::string> calls;  // the order the lifecycle called the service in
};

class TestService {
 public:
  TestService(Script& s, zmq::context_t&, ControlLink&) : s_(s) { s_.calls.push_back("construct"); }
  void Start() {
    s_.calls.push_back("Start");
    if (s_.throw_in_start) throw BadModel("model.safetensors: truncated");
  }
  std::vector<Stat> StartStats() const { return {{"loaded", 7}}; }
  void Serve() {
    s_.calls.push_back("Serve");
    if (s_.stdout_closed) throw StdoutClosed();
    if (s_.runtime_error) throw std::runtime_error("lost the arena");
    if (s_.throw_in_serve) throw Error(kExitOutput, "/dev/full: no space");
  }
  void Finish() { s_.calls.push_back("Finish"); }
  std::vector<Stat> FinalStats() const { return {{"served", 3}}; }
  bool Interrupted() const { return s_.interrupted; }

 private:
  Script& s_;
};

// A service without final stats and without Interrupted() (compute sends its Stats per request).
class QuietService {
 public:
  QuietService(Script&, zmq::context_t&, ControlLink&) {}
  void Start() {}
  std::vector<Stat> StartStats() const { return {}; }
  void Serve() {}
  void Finish() {}
  std::vector<Stat> FinalStats() const { return {}; }
};

class Lifecycle : public ::testing::Test {
 protected:
  Lifecycle() : launcher_(ctx_, zmq::socket_type::router) {
    endpoint_ = "inproc://lifecycle-" + std::to_string(++count_);
    launcher_.bind(endpoint_);
  }

  // Runs the lifecycle of Service inside RunMain as a service's main() does; returns its exit code
  // and keeps stderr.
  template <class Service>
  int Run(Script& script) {
    ControlLink ctl(ctx_, endpoint_, "test-service");
    testing::internal::CaptureStderr();
    const int rc = RunMain("k3-test", [&] { return RunServiceLifecycle<Service>(ctl, script, ctx_, ctl); });
    stderr_ = testing::internal::GetCapturedStderr();
    return rc;
  }

  // Everything the service sent, in order.
  std::vector<ipc::control::Message> Received() {
    std::vector<ipc::control::Message> got;
    ipc::RejectCounter rejects;
    auto deadline = ipc::Clock::now() + std::chrono::seconds(2);
    while (auto m = ipc::ReceiveVerified(launcher_, true, ipc::DecodeControl, deadline, rejects)) {
      EXPECT_EQ(m->identity, "test-service");
      got.push_back(m->message);
      deadline = ipc::Clock::now() + std::chrono::milliseconds(100);
    }
    EXPECT_EQ(rejects.rejected, 0u) << rejects.last_reason;
    return got;
  }

  static inline int count_ = 0;
  zmq::context_t ctx_;
  zmq::socket_t launcher_;
  std::string endpoint_;
  std::string stderr_;
};

template <class T>
const T& As(const ipc::control::Message& m) {
  EXPECT_TRUE(std::holds_alternative<T>(m));
  static const T none{};
  return std::holds_alternative<T>(m) ? std::get<T>(m) : none;
}

TEST_F(Lifecycle, HelloReadyServeStatsThenExit0) {
  Script s;
  EXPECT_EQ(Run<TestService>(s), kExitOk);
  EXPECT_EQ(s.calls, (std::vector<std::string>{"construct", "Start", "Serve", "Finish"}));
  EXPECT_EQ(stderr_, "");
  const auto got = Received();
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(As<ipc::control::Hello>(got[0]).service, "test-service");
  EXPECT_EQ(As<ipc::control::Hello>(got[0]).pid, ::getpid());
  EXPECT_EQ(As<ipc::control::Ready>(got[1]).stats, (std::vector<Stat>{{"loaded", 7}}));
  EXPECT_EQ(As<ipc::control::Stats>(got[2]).stats, (std::vector<Stat>{{"served", 3}}));
}

TEST_F(Lifecycle, EmptyFinalStatsAreNotSent) {
  Script s;
  EXPECT_EQ(Run<QuietService>(s), kExitOk);
  const auto got = Received();
  ASSERT_EQ(got.size(), 2u);
  As<ipc::control::Hello>(got[0]);
  As<ipc::control::Ready>(got[1]);
}

TEST_F(Lifecycle, AShutdownInsideARequestIsExit5) {
  Script s;
  s.interrupted = true;
  EXPECT_EQ(Run<TestService>(s), kExitInterrupted);
  EXPECT_EQ(Received().size(), 3u);  // the final Stats still go out
}

TEST_F(Lifecycle, AStartUpErrorIsDeadWithItsCodeAndOneLine) {
  Script s;
  s.throw_in_start = true;
  EXPECT_EQ(Run<TestService>(s), kExitBadModel);
  EXPECT_EQ(s.calls, (std::vector<std::string>{"construct", "Start"}));
  EXPECT_EQ(stderr_, "k3-test: model.safetensors: truncated\n");
  const auto got = Received();
  ASSERT_EQ(got.size(), 2u);  // Hello, Dead: never Ready
  As<ipc::control::Hello>(got[0]);
  const auto& dead = As<ipc::control::Dead>(got[1]);
  EXPECT_EQ(dead.exit_code, kExitBadModel);
  EXPECT_EQ(dead.reason, "model.safetensors: truncated");
}

TEST_F(Lifecycle, AnErrorWhileServingIsDeadWithItsCode) {
  Script s;
  s.throw_in_serve = true;
  EXPECT_EQ(Run<TestService>(s), kExitOutput);
  EXPECT_EQ(stderr_, "k3-test: /dev/full: no space\n");
  const auto got = Received();
  ASSERT_EQ(got.size(), 3u);  // Hello, Ready, Dead: no final Stats
  As<ipc::control::Ready>(got[1]);
  EXPECT_EQ(As<ipc::control::Dead>(got[2]).exit_code, kExitOutput);
}

TEST_F(Lifecycle, AnyOtherExceptionIsDeadWithExit1) {
  Script s;
  s.runtime_error = true;
  EXPECT_EQ(Run<TestService>(s), kExitRuntime);
  EXPECT_EQ(stderr_, "k3-test: lost the arena\n");
  const auto got = Received();
  ASSERT_EQ(got.size(), 3u);
  const auto& dead = As<ipc::control::Dead>(got[2]);
  EXPECT_EQ(dead.exit_code, kExitRuntime);
  EXPECT_EQ(dead.reason, "lost the arena");
}

TEST_F(Lifecycle, AClosedStdoutIsAQuietStopWithoutDead) {
  Script s;
  s.stdout_closed = true;
  EXPECT_EQ(Run<TestService>(s), kExitInterrupted);
  EXPECT_EQ(stderr_, "");
  EXPECT_EQ(Received().size(), 2u);  // Hello, Ready
}

TEST(ControlLinkTest, AnEndpointThatCannotBeConnectedIsAUsageError) {
  zmq::context_t ctx;
  try {
    ControlLink ctl(ctx, "bogus://x", "test-service");
    FAIL() << "connected to bogus://x";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), kExitUsage);
    EXPECT_EQ(std::string(e.what()).rfind("--control bogus://x: ", 0), 0u) << e.what();
  }
}

}  // namespace
}  // namespace k3::svc
