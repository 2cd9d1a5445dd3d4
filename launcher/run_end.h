// How a run ends, decided from plain facts: whether it was a requested stop, the stop reason
// the report carries, and how long the services get to stop (run_stop.cpp does the waiting).
#pragma once
#include <chrono>
#include <optional>
#include <string>

#include "common/ipc/messages.h"

namespace k3::launch {

const char* SignalName(int sig);  // "SIGINT", "SIGTERM", "SIGHUP", else "a signal"

// A stop signal or a closed stdout ended the run: a requested stop (exit 5), unless compute
// finished first; a Done that says compute was interrupted (it saw the same Ctrl-C) still is.
bool RequestedStop(bool stop_requested, bool done, std::optional<ipc::compute::StopReason> finish);

// The report's stop_reason: the failure's reason, "run finished", "stdout closed" or
// "interrupted by SIG...".
std::string StopReasonText(bool requested, const std::string* failure, bool stdout_closed, int stop_signal);

// After Shutdown: how long the services get to exit on their own, then how long after SIGTERM
// before SIGKILL. For a requested stop compute reaches a safe point within 1 s, so 1.2 s at
// most, then 0.3 s; otherwise --shutdown-timeout, then 2 s.
struct StopGrace {
  std::chrono::milliseconds exit, after_sigterm;
};
StopGrace StopGraceFor(bool requested, double shutdown_timeout_seconds);

}  // namespace k3::launch
