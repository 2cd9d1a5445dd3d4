#include "launcher/run_end.h"

#include <signal.h>

#include <algorithm>

namespace k3::launch {

const char* SignalName(int sig) {
  switch (sig) {
    case SIGINT: return "SIGINT";
    case SIGTERM: return "SIGTERM";
    case SIGHUP: return "SIGHUP";
    default: return "a signal";
  }
}

bool RequestedStop(bool stop_requested, bool done, std::optional<ipc::compute::StopReason> finish) {
  return stop_requested && (!done || finish == ipc::compute::StopReason::kInterrupted);
}

std::string StopReasonText(bool requested, const std::string* failure, bool stdout_closed, int stop_signal) {
  if (!requested) return failure ? *failure : "run finished";
  if (stdout_closed) return "stdout closed";
  return std::string("interrupted by ") + SignalName(stop_signal);
}

StopGrace StopGraceFor(bool requested, double shutdown_timeout_seconds) {
  const double grace = requested ? std::min(shutdown_timeout_seconds, 1.2) : shutdown_timeout_seconds;
  return {std::chrono::milliseconds(static_cast<int64_t>(grace * 1000)),
          std::chrono::milliseconds(requested ? 300 : 2000)};
}

}  // namespace k3::launch
