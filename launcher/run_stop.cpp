// The end of a run: Shutdown to every service and the wait (run_end.h's grace), then the
// one-shot run's report (report.h) and its exit code.
#include "common/error.h"
#include "launcher/run_end.h"
#include "launcher/runner.h"

namespace k3::launch {

// Shutdown to every service, then wait for them to exit while still taking their messages
// (final Stats, compute's Done, a Dead about an output that could not be written) and exit
// statuses. Every service gets Shutdown at once; for a requested stop (signal, closed stdout)
// the wait is 1.2 s at most (compute reaches a safe point within 1 s), then SIGTERM (0.3 s).
void Runner::Stop(const std::string& reason) {
  stopped_ = true;
  peaks_.Sample(sup_.services());
  stopping_ = true;
  // Compute first, so it starts towards its safe point before the weight services go.
  for (bool compute : {true, false})
    for (const Service& s : sup_.services()) {
      if (s.pid <= 0 || (s.name == "compute") != compute) continue;
      try {
        ipc::SendMessage(*control_, ipc::Encode(ipc::control::Shutdown{reason}), {}, s.name);
      } catch (const Error&) {
        // not connected (yet): SIGTERM below takes care of it
      }
    }
  // Compute stops at a safe point within 1 s without the weight services (it looks for the
  // stop while it waits for weights too), so they stop together and the weight services get
  // the whole window to send their final Stats.
  const StopGrace grace = StopGraceFor(StopRequested(), opt_.shutdown_timeout);
  const auto deadline = Clock::now() + grace.exit;
  while (sup_.AnyRunning() && Clock::now() < deadline)
    Pump(std::min(deadline, Clock::now() + std::chrono::milliseconds(20)));
  sup_.KillAll(grace.after_sigterm);
  // What the services sent right before exiting may still be on its way.
  Pump(Clock::now() + std::chrono::milliseconds(30));
  DrainSockets();
  ForwardChildStderr(true);
  progress_.Clear();
  progress_.FinishText();  // nothing more goes to stdout
}

RunRecord Runner::Record(const std::vector<int32_t>& ids, bool interrupted, const std::string& reason) const {
  RunRecord r;
  r.prompt_ids = ids;
  r.generated_ids = one_shot_.generated();
  r.token_seconds = one_shot_.token_seconds();
  r.done = one_shot_.done();
  r.finish_reason = one_shot_.finish_reason();
  r.run_seconds = run_seconds_;
  r.first_token_seconds = one_shot_.first_token_seconds();
  r.service_stats = stats_;
  r.peak = peaks_.peaks();
  for (const Service& s : sup_.services()) r.restarts[s.name] = s.restarts;
  r.rejected_messages = rejects_.rejected;
  if (tok_ && tok_->stream_done()) r.generated_text = shown_text_;
  if (stop_text_.matched()) r.stop_text = stop_text_.matched_stop();
  if (tok_) r.tokenizer_error = tok_->failure();
  r.expert_inputs = opt_.expert_inputs;
  r.disk_raw_rate = m_.disk_raw_rate;
  r.expert_servers = opt_.expert_server;
  r.prefix_store = opt_.prefix_store;
  r.prefetch_hints = HintsOffReason(opt_, m_, plan_) == nullptr;
  r.interrupted = interrupted;
  r.stop_reason = reason;
  r.state_loaded_tokens = state_loaded_tokens_;
  r.state_saved = state_saved_;
  r.sampling = opt_.sampling;
  if (opt_.logprobs >= 0) r.logprobs = one_shot_.tokens();
  r.perplexity = opt_.perplexity;
  return r;
}

// After the one Generate (or a stop or a failure): services stopped, the summary and --out
// report, the exit code (the run's failure is thrown: failure_policy.h).
int Runner::FinishOneShot(const std::vector<int32_t>& ids) {
  const bool done = one_shot_.done().has_value();
  const bool requested = RequestedStop(StopRequested(), done, one_shot_.finish_reason());
  const std::string stop_reason = StopReasonText(requested, failure_.ending() ? &failure_.ending()->msg : nullptr,
                                                 stdout_closed_, sup_.stop_signal());
  Stop(stop_reason);
  if (requested && run_seconds_ == 0)
    run_seconds_ = std::chrono::duration<double>(Clock::now() - one_shot_.generate_time()).count();

  const std::optional<Failure> fail = failure_.Final();
  if (done || requested) {
    const nlohmann::json report = BuildReport(Record(ids, requested, stop_reason), plan_, SizeArenas(m_, plan_));
    // A closed stdout ends quietly: nobody is reading, and the report has the numbers.
    if (!stdout_closed_ || fail)
      for (const std::string& line : SummaryLines(report, plan_.budget)) progress_.Always(line);
    if (!opt_.out.empty()) {
      if (fail) {
        try {
          WriteReportFile(opt_.out, report);
        } catch (const Error&) {
          // the service's failure is what gets reported
        }
      } else {
        WriteReportFile(opt_.out, report);
      }
    }
  }
  if (fail) throw Error(static_cast<ExitCode>(fail->code), fail->msg);
  if (requested) return stdout_closed_ ? kExitInterrupted : InterruptedExit();
  return kExitOk;
}

}  // namespace k3::launch
