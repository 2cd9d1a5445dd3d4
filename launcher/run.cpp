// The run's sequence: start the services (the tokenizer first for a text prompt), wait for
// Ready, then one Generate, a chat session or serve mode, and the end. The jobs it calls live
// in the run_*.cpp files (runner.h lists them).
#include "launcher/run.h"

#include <algorithm>
#include <cstdio>

#include "common/end_ids.h"
#include "common/error.h"
#include "common/ipc/shm_arena.h"
#include "launcher/run_end.h"
#include "launcher/runner.h"

namespace k3::launch {

Runner::Runner(const LaunchOptions& opt, const ModelLayout& m, const plan::MemoryPlan& p, const PromptInput& in)
    : opt_(opt), m_(m), plan_(p), in_(in), progress_(ProgressLine::ForStdio(opt.quiet)), one_shot_(opt.logprobs >= 0),
      stop_ids_(MergeIds(in.end_ids, opt.stop_ids)), stop_text_(opt.stop) {}

int Runner::Run() {
  std::vector<int32_t> ids = in_.ids;
  const RunEndpoints ep = OpenSockets();
  t0_ = Clock::now();
  try {
    // A text prompt is encoded first, by the tokenizer alone: one that does not fit the
    // context is refused before any weight service starts (nothing is pinned or read).
    Spawn(ep, in_.has_text);
    const auto ready_deadline = t0_ + std::chrono::milliseconds(static_cast<int64_t>(opt_.ready_timeout * 1000));
    auto all_ready = [&] {
      return std::all_of(sup_.services().begin(), sup_.services().end(), [](const Service& s) { return s.ready; });
    };
    auto not_ready = [&] { return RuntimeFailure("services not ready after " + std::to_string(opt_.ready_timeout) + " s"); };
    if (in_.has_text) {
      auto tok_ready = [&] {
        return std::any_of(sup_.services().begin(), sup_.services().end(),
                           [](const Service& s) { return s.name == "tokenizer" && s.ready; });
      };
      while (!tok_ready() && !Failed() && !StopRequested())
        if (!Pump(ready_deadline)) throw not_ready();
      if (!Failed() && !StopRequested()) ids = EncodePrompt();
      // A loaded state's ids count too (main.cpp checked id prompts the same way).
      const int64_t held = std::max<int64_t>(0, in_.state_tokens) + static_cast<int64_t>(ids.size());
      if (held > opt_.context) throw UsageError(PromptTooLong(held, opt_.context));
      if (!Failed() && !StopRequested()) StartRest();
    }
    while (!all_ready() && !Failed() && !StopRequested())
      if (!Pump(ready_deadline)) throw not_ready();
    if (!Failed() && !StopRequested()) {
      char line[96];
      std::snprintf(line, sizeof line, "[launch] all services ready in %.2f s; generating",
                    std::chrono::duration<double>(Clock::now() - t0_).count());
      if (Serving()) return Serve();
      progress_.Info(line);
      if (opt_.chat) {
        chat_active_ = true;
        progress_.Clear();
        const ChatResult chat = RunChat(*this, opt_, static_cast<int32_t>(m_.cfg.vocab_size));
        return FinishChat(chat);
      }
      std::string stops;
      for (int32_t id : stop_ids_) {
        if (!stops.empty()) stops += ',';
        stops += std::to_string(id);
      }
      progress_.Info("[launch] stop ids: " + (stops.empty() ? std::string("none") : stops) +
                     (opt_.ignore_eos ? " (--ignore-eos)" : ""));
      if (!opt_.load_state.empty() && !ids.empty() && !Failed() && !StopRequested()) {
        // main.cpp checked the file; compute checks it again as it loads it (same rules).
        const auto s = StateRoundTrip(ipc::compute::StateAction::kLoad, opt_.load_state);
        if (s && !s->ok) throw BadInput("--load-state: " + s->error);
        if (s) state_loaded_tokens_ = s->position;
      }
      if (!ids.empty() && !Failed() && !StopRequested()) SendGenerate(ids);
    }
    auto last_sample = Clock::now();
    while (!one_shot_.done() && !Failed() && !StopRequested()) {
      Pump(Clock::now() + std::chrono::milliseconds(200));
      if (Clock::now() - last_sample > std::chrono::milliseconds(250)) {
        peaks_.Sample(sup_.services());
        last_sample = Clock::now();
      }
    }
    // From the Generate's send, as first_token_seconds (so that one is at most this one).
    if (one_shot_.sent()) run_seconds_ = std::chrono::duration<double>(Clock::now() - one_shot_.generate_time()).count();
    if (one_shot_.done()) {
      // Compute sends its Stats right before Done; give the message a moment to arrive.
      Pump(Clock::now() + std::chrono::milliseconds(50));
      if (tok_) FlushText();
    }
    if (one_shot_.done() && !opt_.save_state.empty() &&
        one_shot_.finish_reason() != ipc::compute::StopReason::kInterrupted && !Failed() && !StopRequested()) {
      const auto s = StateRoundTrip(ipc::compute::StateAction::kSave, opt_.save_state);
      if (s && !s->ok) throw Error(kExitOutput, "--save-state: " + s->error);
      if (s) state_saved_ = opt_.save_state;
    }
  } catch (const Error& e) {
    if (!stopped_) Stop(e.what());
    throw;
  }
  return FinishOneShot(ids);
}

int Runner::InterruptedExit() {
  progress_.Always(std::string("k3-launch: interrupted by ") + SignalName(sup_.stop_signal()) + "; services stopped");
  return kExitInterrupted;
}

std::string PromptTooLong(int64_t prompt_tokens, int64_t context) {
  return "the prompt has " + std::to_string(prompt_tokens) + " tokens but the context is " + std::to_string(context) +
         " (--context): it does not fit";
}

int RunPipeline(const LaunchOptions& opt, const ModelLayout& m, const plan::MemoryPlan& p,
                const PromptInput& prompt) {
  Runner r(opt, m, p, prompt);
  return r.Run();
}

}  // namespace k3::launch
