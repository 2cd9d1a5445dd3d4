// Process-shell pieces shared by the pipeline services (trunk reader, expert fetcher, tokenizer
// serve, compute --pipeline, k3-server): the one lifecycle they run on, the weight services'
// common flags, the service-loop wait, stop signals, the control link to the launcher (Hello,
// Ready, Stats, Dead, Shutdown), the stop check for long work and number formatting for the
// progress and stats lines. (k3-expert-server, started by hand, has no control link: it uses
// only the stop signals, the read worker and the formatting.)
//
// Thread-safety: a ControlLink is used by one thread at a time (k3-server's engine thread has it
// while the HTTP server runs); the signal flag is atomic.
#pragma once
#include <zmq.hpp>

#include <chrono>
#include <cstdint>
#include <initializer_list>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

#include "common/error.h"
#include "common/format_bytes.h"
#include "common/ipc/messages.h"
#include "common/ipc/zmq_channel.h"

// Declared, not included: CLI11 costs seconds per file that includes it.
namespace CLI {
class App;
}

namespace k3::svc {

// SIGTERM / SIGINT / SIGHUP are stop requests: they set a flag (the loop stops at its next
// poll, the process exits 5); SIGPIPE is ignored.
void InstallStopSignals();
bool StopRequested();

class ControlLink {
 public:
  // DEALER with identity `service`, connected to `endpoint`. Linger is short so a dead
  // launcher never blocks exit.
  ControlLink(zmq::context_t& ctx, const std::string& endpoint, const std::string& service);
  void Hello();
  void Ready(const std::vector<ipc::control::Stat>& stats);
  void Stats(const std::vector<ipc::control::Stat>& stats);
  void Dead(int exit_code, const std::string& reason);
  // Drains waiting control messages; true once a Shutdown has arrived (reason logged).
  bool ShutdownReceived();
  zmq::socket_t& socket() { return sock_; }
  ipc::RejectCounter& rejects() { return rejects_; }

 private:
  std::string service_;
  zmq::socket_t sock_;
  ipc::RejectCounter rejects_;
  bool shutdown_ = false;
};

using ipc::Clock;
inline double Seconds(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// One wait of a service loop: polls `sockets` and the control link for up to `timeout` (a
// signal interrupting the poll counts as a wake-up). False once a stop signal or a Shutdown has
// arrived, true when the caller should look at its sockets.
bool WaitForWork(ControlLink& ctl, std::initializer_list<zmq::socket_ref> sockets,
                 std::chrono::milliseconds timeout);
bool WaitForWork(ControlLink& ctl, const std::vector<zmq::socket_ref>& sockets, std::chrono::milliseconds timeout);

// "Should this long piece of work stop now?" for a service busy between two WaitForWork calls
// (compute in a forward pass): true once a stop signal or a Shutdown has arrived. Looks at the
// control socket (non-blocking) at most once per `period`, so calling it often costs nothing.
class StopPoll {
 public:
  explicit StopPoll(ControlLink& ctl, std::chrono::milliseconds period = std::chrono::milliseconds(50))
      : ctl_(ctl), period_(period) {}
  bool operator()();

 private:
  ControlLink& ctl_;
  std::chrono::milliseconds period_;
  Clock::time_point next_{};
  bool stop_ = false;
};

double MBps(uint64_t bytes, double seconds);  // 1e6-byte megabytes per second (0 when no time)

// The lifecycle every pipeline service runs on: Hello, start-up work (Service's constructor and
// Start()), Ready with StartStats(), Serve() until a Shutdown or a stop signal, Finish(), final
// Stats (not sent when FinalStats() is empty: compute sends its Stats with each request), then
// exit 0 after a Shutdown or 5 after a stop signal; a service that can be stopped inside a
// request by a Shutdown also has Interrupted() (then 5 as for a signal). An error on the way is
// sent to the launcher as Dead (its code and message) and rethrown, for main()'s RunMain to
// print as the one line "<binary>: <message>" and return as the exit code (docs/exit-codes.md).
template <class Service, class... Args>
int RunServiceLifecycle(ControlLink& ctl, Args&&... args) {
  try {
    ctl.Hello();
    Service service(std::forward<Args>(args)...);
    service.Start();
    ctl.Ready(service.StartStats());
    service.Serve();
    service.Finish();
    if (const std::vector<ipc::control::Stat> stats = service.FinalStats(); !stats.empty()) ctl.Stats(stats);
    bool interrupted = StopRequested();
    if constexpr (requires { service.Interrupted(); }) interrupted = interrupted || service.Interrupted();
    return interrupted ? kExitInterrupted : kExitOk;
  } catch (const StdoutClosed&) {
    throw;  // a requested stop, not a death (RunMain: exit 5, quiet)
  } catch (const Error& e) {
    ctl.Dead(e.code(), e.what());
    throw;
  } catch (const std::exception& e) {
    ctl.Dead(kExitRuntime, e.what());
    throw;
  }
}

// The process shell of every pipeline service (trunk reader, expert fetcher, compute
// --pipeline, tokenizer serve, k3-server), called inside main()'s RunMain once the flags are
// parsed and checked: installs the stop signals, connects to the launcher at `control` as
// `service` and runs the lifecycle with Service(flags, ctx, ctl). A control endpoint that
// cannot be connected is a usage error (one line, exit 2) and sends no Dead: there is no link.
template <class Service, class Flags>
int RunService(const std::string& control, const char* service, const Flags& flags) {
  InstallStopSignals();
  zmq::context_t ctx;
  ControlLink ctl(ctx, control, service);
  return RunServiceLifecycle<Service>(ctl, flags, ctx, ctl);
}

// The flags every weight service takes; a service's own Flags derive from this.
struct WeightServiceFlags {
  std::string model, control, bind, io = "pread";
  int inflight = 4;
};

// Registers --model, --control and --bind (required), --io and --inflight on `app`.
void AddWeightServiceFlags(CLI::App& app, WeightServiceFlags& f);

}  // namespace k3::svc
