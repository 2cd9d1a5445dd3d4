#include "launcher/failure_policy.h"

#include <signal.h>
#include <sys/wait.h>

#include "common/error.h"
#include "launcher/supervisor.h"

namespace k3::launch {

int KnownCode(int code) { return code >= 1 && code <= 7 ? code : kExitRuntime; }

DeathVerdict OnDeath(const DeathFacts& f) {
  const int st = f.status;
  const std::string what = DescribeExit(st);
  if (f.stopping) {
    // Ending on the Shutdown (0), on a stop signal (5, or killed by our SIGTERM) is expected;
    // so is however compute ends when we cut its generation short.
    const bool expected = WIFSIGNALED(st) ? (WTERMSIG(st) == SIGTERM || WTERMSIG(st) == SIGKILL)
                                          : (WEXITSTATUS(st) == 0 || WEXITSTATUS(st) == kExitInterrupted);
    if ((f.service == "compute" && f.stop_requested) || expected) return {};
    return {DeathVerdict::kFail,
            {WIFEXITED(st) ? KnownCode(WEXITSTATUS(st)) : kExitRuntime, f.service, f.service + ": " + what + " while stopping"},
            ""};
  }
  if (f.failed) return {};
  // The same Ctrl-C reached the service (one process group): its exit 5 is this stop.
  if (f.stop_requested && WIFEXITED(st) && WEXITSTATUS(st) == kExitInterrupted) return {};
  if (f.service == "compute" || !f.restartable)
    return {DeathVerdict::kFail, {kExitRuntime, f.service, f.service + ": " + what}, "[launch] " + f.service + " " + what};
  if (f.restarts >= kMaxRestarts)
    return {DeathVerdict::kFail,
            {kExitRuntime, f.service,
             f.service + ": " + what + " (restarted " + std::to_string(kMaxRestarts) + " times already)"},
            ""};
  return {DeathVerdict::kRestart, {}, "[launch] " + f.service + " " + what + "; restarting it"};
}

DeadVerdict OnDead(const DeadFacts& f) {
  // Exit 5 while we stop it is the stop we asked for.
  if (f.exit_code == 0 || (f.stopping && f.exit_code == kExitInterrupted)) return {};
  if (f.stopping && f.service == "compute" && f.stop_requested) return {};
  Failure failure{KnownCode(f.exit_code), f.service, f.service + ": " + f.reason};
  // Restarting helps only a service that had come up and then failed at run time (exit 1)
  // or was stopped by someone else's signal (5); at start-up, for compute, while stopping or
  // with any other code (bad model, output, input) it ends the run.
  const bool restart_helps =
      f.known && f.restartable && f.ready && (failure.code == kExitRuntime || failure.code == kExitInterrupted);
  return {f.stopping || !restart_helps ? DeadVerdict::kFail : DeadVerdict::kRecord, std::move(failure)};
}

void RunFailure::Fail(Failure f) {
  if (!failure_) failure_ = std::move(f);
}

void RunFailure::Dead(Failure f) {
  if (!first_dead_) first_dead_ = std::move(f);
}

void RunFailure::Ready(const std::string& service) {
  if (first_dead_ && first_dead_->service == service && !failure_) first_dead_.reset();
}

std::optional<Failure> RunFailure::Final() const {
  if (!failure_) return std::nullopt;
  if (first_dead_) return first_dead_;
  return failure_;
}

}  // namespace k3::launch
