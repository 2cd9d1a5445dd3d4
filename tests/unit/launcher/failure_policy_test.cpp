// The launcher's failure decisions (launcher/failure_policy.h) against docs/pipeline.md
// "Failure and restart" and "Exit code and last line of a failed run": which deaths restart a
// service, the restart cap, which exits are expected while stopping, what a Dead means, and
// which failure is the run's.
#include "launcher/failure_policy.h"

#include <gtest/gtest.h>
#include <signal.h>

namespace k3::launch {
namespace {

int Exited(int code) { return (code & 0xff) << 8; }  // a waitpid status, as WEXITSTATUS reads it
int Killed(int sig) { return sig & 0x7f; }

DeathFacts Reader(int status, int restarts = 0) {
  DeathFacts f;
  f.service = "trunk-reader";
  f.restartable = true;
  f.restarts = restarts;
  f.status = status;
  return f;
}

TEST(FailurePolicy, ExitCodesOutsideTheTableAreRuntimeFailures) {
  for (int c = 1; c <= 7; ++c) EXPECT_EQ(KnownCode(c), c);
  EXPECT_EQ(KnownCode(0), 1);
  EXPECT_EQ(KnownCode(8), 1);
  EXPECT_EQ(KnownCode(127), 1);
}

TEST(FailurePolicy, ARestartableServiceIsRestartedFiveTimesThenTheRunFails) {
  for (int r = 0; r < 5; ++r) {
    const DeathVerdict v = OnDeath(Reader(Killed(SIGKILL), r));
    EXPECT_EQ(v.action, DeathVerdict::kRestart) << r;
    EXPECT_EQ(v.note, "[launch] trunk-reader killed by signal 9; restarting it");
  }
  const DeathVerdict v = OnDeath(Reader(Exited(1), 5));
  EXPECT_EQ(v.action, DeathVerdict::kFail);
  EXPECT_EQ(v.failure, (Failure{1, "trunk-reader", "trunk-reader: exited with status 1 (restarted 5 times already)"}));
  EXPECT_EQ(kMaxRestarts, 5);
}

TEST(FailurePolicy, ComputeAndUnrestartableServicesEndTheRun) {
  DeathFacts f = Reader(Killed(SIGKILL));
  f.service = "compute";
  DeathVerdict v = OnDeath(f);
  EXPECT_EQ(v.action, DeathVerdict::kFail);
  EXPECT_EQ(v.failure, (Failure{1, "compute", "compute: killed by signal 9"}));
  EXPECT_EQ(v.note, "[launch] compute killed by signal 9");
  f = Reader(Exited(3));
  f.service = "server";
  f.restartable = false;
  v = OnDeath(f);
  EXPECT_EQ(v.action, DeathVerdict::kFail);
  EXPECT_EQ(v.failure.code, 1);  // a death without a Dead is a runtime failure, whatever its status
  EXPECT_EQ(v.failure.msg, "server: exited with status 3");
}

TEST(FailurePolicy, AfterAFailureOrOnTheSameCtrlCDeathsAreNotNews) {
  DeathFacts f = Reader(Killed(SIGKILL));
  f.failed = true;
  EXPECT_EQ(OnDeath(f).action, DeathVerdict::kIgnore);
  f = Reader(Exited(5));
  f.stop_requested = true;  // one process group: the service saw the same SIGINT
  EXPECT_EQ(OnDeath(f).action, DeathVerdict::kIgnore);
  f = Reader(Exited(1));
  f.stop_requested = true;  // but not any other exit
  EXPECT_EQ(OnDeath(f).action, DeathVerdict::kRestart);
}

TEST(FailurePolicy, WhileStoppingOnlyShutdownSignalsAndExit0Or5AreExpected) {
  for (int st : {Exited(0), Exited(5), Killed(SIGTERM), Killed(SIGKILL)}) {
    DeathFacts f = Reader(st);
    f.stopping = true;
    f.failed = true;
    EXPECT_EQ(OnDeath(f).action, DeathVerdict::kIgnore) << st;
  }
  DeathFacts f = Reader(Exited(4));
  f.stopping = true;
  DeathVerdict v = OnDeath(f);
  EXPECT_EQ(v.action, DeathVerdict::kFail);
  EXPECT_EQ(v.failure, (Failure{4, "trunk-reader", "trunk-reader: exited with status 4 while stopping"}));
  f.status = Killed(SIGSEGV);
  EXPECT_EQ(OnDeath(f).failure, (Failure{1, "trunk-reader", "trunk-reader: killed by signal 11 while stopping"}));
  // However compute ends when a requested stop cut its generation short.
  f.service = "compute";
  f.stop_requested = true;
  EXPECT_EQ(OnDeath(f).action, DeathVerdict::kIgnore);
}

DeadFacts Dead(const std::string& service, int code, bool ready) {
  DeadFacts f;
  f.service = service;
  f.exit_code = code;
  f.reason = "why";
  f.known = true;
  f.restartable = service != "compute";
  f.ready = ready;
  return f;
}

TEST(FailurePolicy, ADeadEndsTheRunUnlessARestartCanHelp) {
  // 1 or 5 from a restartable service after Ready: recorded, the restart decides.
  for (int code : {1, 5}) {
    const DeadVerdict v = OnDead(Dead("expert-fetcher", code, true));
    EXPECT_EQ(v.action, DeadVerdict::kRecord) << code;
    EXPECT_EQ(v.failure, (Failure{code, "expert-fetcher", "expert-fetcher: why"}));
  }
  EXPECT_EQ(OnDead(Dead("expert-fetcher", 1, false)).action, DeadVerdict::kFail);  // before Ready
  EXPECT_EQ(OnDead(Dead("expert-fetcher", 3, true)).action, DeadVerdict::kFail);   // bad model
  EXPECT_EQ(OnDead(Dead("compute", 1, true)).action, DeadVerdict::kFail);
  DeadFacts unknown = Dead("expert-fetcher", 1, true);
  unknown.known = false;
  EXPECT_EQ(OnDead(unknown).action, DeadVerdict::kFail);
  EXPECT_EQ(OnDead(Dead("compute", 42, true)).failure.code, 1);
  DeadFacts stopping = Dead("expert-fetcher", 1, true);
  stopping.stopping = true;
  EXPECT_EQ(OnDead(stopping).action, DeadVerdict::kFail);
}

TEST(FailurePolicy, ADeadThatIsTheStopWeAskedForIsIgnored) {
  EXPECT_EQ(OnDead(Dead("trunk-reader", 0, true)).action, DeadVerdict::kIgnore);
  DeadFacts f = Dead("trunk-reader", 5, true);
  f.stopping = true;
  EXPECT_EQ(OnDead(f).action, DeadVerdict::kIgnore);
  f = Dead("compute", 4, true);
  f.stopping = true;
  EXPECT_EQ(OnDead(f).action, DeadVerdict::kFail);  // --dump-logits /dev/full while stopping
  f.stop_requested = true;
  EXPECT_EQ(OnDead(f).action, DeadVerdict::kIgnore);
}

TEST(RunFailure, TheFirstDeadIsTheCauseOverLaterDeaths) {
  RunFailure r;
  EXPECT_FALSE(r.Final());
  r.Dead({4, "expert-fetcher", "expert-fetcher: cannot write"});
  EXPECT_FALSE(r.Final());  // a Dead alone does not end the run
  r.Fail({1, "compute", "compute: exited with status 1"});
  r.Dead({1, "compute", "compute: lost its fetcher"});
  ASSERT_TRUE(r.Final());
  EXPECT_EQ(*r.Final(), (Failure{4, "expert-fetcher", "expert-fetcher: cannot write"}));
  EXPECT_EQ(r.ending()->service, "compute");  // what ended it
}

TEST(RunFailure, WithoutADeadTheFirstFailureAndARestartForgetsItsDead) {
  RunFailure r;
  r.Dead({1, "trunk-reader", "trunk-reader: read failed"});
  r.Ready("expert-fetcher");  // someone else
  r.Ready("trunk-reader");    // back after its restart: not the cause any more
  r.Fail({1, "compute", "compute: killed by signal 9"});
  r.Fail({1, "tokenizer", "tokenizer: later"});
  EXPECT_EQ(*r.Final(), (Failure{1, "compute", "compute: killed by signal 9"}));
  r.Dead({3, "expert-fetcher", "expert-fetcher: bad model"});
  r.Ready("expert-fetcher");  // the run has failed: the cause stays
  EXPECT_EQ(r.Final()->service, "expert-fetcher");
}

}  // namespace
}  // namespace k3::launch
