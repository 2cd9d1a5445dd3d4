// The launcher's decisions about a failing service, as functions of plain facts (no sockets,
// no processes): whether a death is expected, restarted or ends the run; what a Dead means;
// and which failure is the run's (docs/pipeline.md "Failure and restart", "Exit code and last
// line of a failed run"). run_control.cpp feeds them from waitpid and the control socket.
#pragma once
#include <optional>
#include <string>

namespace k3::launch {

// A restartable service restarted this many times that dies again ends the run.
constexpr int kMaxRestarts = 5;

// Exit codes a service can report (docs/exit-codes.md); anything else counts as a runtime failure.
int KnownCode(int code);

// Why the run ends badly: an exit code and the one-line reason "<service>: <reason>".
struct Failure {
  int code = 1;
  std::string service;
  std::string msg;
  bool operator==(const Failure&) const = default;
};

// A child's end as waitpid reported it, and what the run was doing.
struct DeathFacts {
  std::string service;
  bool restartable = false;
  int restarts = 0;           // restarts so far
  int status = 0;             // waitpid status
  bool stopping = false;      // Shutdown sent: exits now are expected
  bool stop_requested = false;  // a stop signal or a closed stdout
  bool failed = false;        // the run has failed already
};

struct DeathVerdict {
  enum Action { kIgnore, kFail, kRestart } action = kIgnore;
  Failure failure;   // kFail
  std::string note;  // a progress line to show ("" for none)
};
DeathVerdict OnDeath(const DeathFacts& f);

// A Dead the service sent before exiting.
struct DeadFacts {
  std::string service;
  int exit_code = 0;
  std::string reason;
  bool known = false;        // a service this run started
  bool restartable = false;
  bool ready = false;        // it had sent Ready since its last start
  bool stopping = false;
  bool stop_requested = false;
};

struct DeadVerdict {
  enum Action { kIgnore, kRecord, kFail } action = kIgnore;  // kRecord: a restart may follow
  Failure failure;  // kRecord, kFail
};
DeadVerdict OnDead(const DeadFacts& f);

// Which failure is the run's: the first service that told us why it died (a Dead) is the root
// cause, later deaths (compute losing its fetcher, say) are consequences; without any Dead,
// what ended the run. A service back after a restart no longer counts as the cause.
class RunFailure {
 public:
  void Fail(Failure f);    // what ends the run (the first one stays)
  void Dead(Failure f);    // a Dead received (the first one stays)
  void Ready(const std::string& service);  // Ready again after a restart
  bool failed() const { return failure_.has_value(); }
  const std::optional<Failure>& ending() const { return failure_; }
  std::optional<Failure> Final() const;  // nullopt while the run has not failed

 private:
  std::optional<Failure> first_dead_, failure_;
};

}  // namespace k3::launch
