// --serve: k3-server is compute's client; the launcher relays what /health and /metrics need
// (every service's Ready, the weight services' Stats) and supervises until a stop or a failure.
#include <unistd.h>

#include "common/error.h"
#include "common/user_file.h"
#include "launcher/command_lines.h"
#include "launcher/run_end.h"
#include "launcher/runner.h"
#include "launcher/serve_address.h"

namespace k3::launch {

void Runner::RelayToServer(const ipc::Encoded& m) {
  try {
    ipc::SendMessage(*control_, m, {}, "server");
  } catch (const Error&) {
    // not connected yet: its Ready makes us send every service's Ready again
  }
}

// Every service that is ready, as a Ready to k3-server (its /health waits for them all).
void Runner::RelayReadyToServer() {
  for (const Service& s : sup_.services())
    if (s.ready && s.name != "server") RelayToServer(ipc::Encode(ipc::control::Ready{s.name, {}}));
}

// Supervises (restarts, deaths, stderr) until a stop signal or a failure, then stops every service.
int Runner::Serve() {
  const int port = static_cast<int>(stats_["server"]["ready_port"]);  // k3-server's Ready: the port it bound
  progress_.Info(std::string("[launch] all services ready in ") +
                 std::to_string(std::chrono::duration<double>(Clock::now() - t0_).count()).substr(0, 4) +
                 " s; serving at " + ServeUrl(opt_.serve, port) + " (Ctrl-C stops)");
  // For a script that asked for port 0: where to connect, once everything is ready.
  if (!opt_.out.empty())
    WriteFileAtomically(opt_.out, ServeReport(opt_.serve, port, ServedModelName(opt_), ::getpid()).dump(2) + "\n",
                        "--out", kExitOutput);
  while (!Failed() && !StopRequested()) Pump(Clock::now() + std::chrono::milliseconds(200));
  const std::string reason =
      Failed() ? failure_.ending()->msg : std::string("interrupted by ") + SignalName(sup_.stop_signal());
  Stop(reason);
  if (const std::optional<Failure> fail = failure_.Final()) throw Error(static_cast<ExitCode>(fail->code), fail->msg);
  return InterruptedExit();
}

}  // namespace k3::launch
