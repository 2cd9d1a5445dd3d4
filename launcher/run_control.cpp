// The control socket (Hello, Ready, Stats, Dead) and the services' deaths. What a death or a
// Dead means is failure_policy.h's; this file applies it.
#include <algorithm>

#include "common/error.h"
#include "launcher/runner.h"

namespace k3::launch {

void Runner::HandleControl(const ipc::Received<ipc::control::Message>& r) {
  using namespace ipc::control;
  std::visit(
      [&](const auto& msg) {
        using T = std::decay_t<decltype(msg)>;
        if constexpr (std::is_same_v<T, Hello>) {
          // A Hello must come from the child started under that name (an old instance of a
          // restarted service, or anything else on the socket, is rejected and counted).
          const std::string why = HelloMismatch(sup_.services(), r.identity, msg.service, msg.pid);
          if (!why.empty()) {
            ++rejects_.rejected;
            rejects_.last_reason = why;
            if (!hello_mismatch_logged_) progress_.Info("[launch] rejected: " + rejects_.last_reason);
            hello_mismatch_logged_ = true;
          }
        } else if constexpr (std::is_same_v<T, Ready>) {
          for (Service& s : sup_.services())
            if (s.name == msg.service) {
              s.ready = true;
              // A restarted tokenizer lost what was in flight (and its stream state).
              if (s.name == "tokenizer" && s.restarts > 0 && tok_) tok_->Resend();
            }
          // Back after a restart: its earlier death was not what ends this run.
          failure_.Ready(msg.service);
          if (msg.service == "trunk-reader") progress_.Clear();
          progress_.Info("[launch] " + msg.service + " ready");
          for (const Stat& st : msg.stats) stats_[msg.service]["ready_" + st.name] = st.value;
          if (Serving()) RelayReadyToServer();
        } else if constexpr (std::is_same_v<T, Stats>) {
          for (const Stat& st : msg.stats) stats_[msg.service][st.name] = st.value;
          OnStats(msg.service);
          if (Serving() && msg.service != "server") RelayToServer(ipc::Encode(msg));
        } else if constexpr (std::is_same_v<T, Dead>) {
          progress_.Info("[launch] " + msg.service + " is dying (exit " + std::to_string(msg.exit_code) +
                         "): " + msg.reason);
          DeadFacts f{msg.service, msg.exit_code, msg.reason, false, false, false, stopping_, StopRequested()};
          for (const Service& s : sup_.services())
            if (s.name == msg.service) {
              f.known = true;
              f.restartable = s.restartable;
              f.ready = s.ready;
              break;
            }
          const DeadVerdict v = OnDead(f);
          if (v.action == DeadVerdict::kIgnore) return;
          failure_.Dead(v.failure);
          if (v.action == DeadVerdict::kFail) Fail(v.failure);
        }
      },
      r.message);
}

void Runner::OnStats(const std::string& service) {
  const double since_start = std::chrono::duration<double>(Clock::now() - t0_).count();
  const double since_generate = std::chrono::duration<double>(Clock::now() - one_shot_.generate_time()).count();
  const ProgressStep step = stats_progress_.Update(service, stats_[service], since_start, since_generate, chat_active_);
  switch (step.kind) {
    case ProgressStep::kShow: progress_.Show(step.text); break;
    case ProgressStep::kInfo: progress_.Info(step.text); break;
    case ProgressStep::kClear: progress_.Clear(); break;
    case ProgressStep::kNone: break;
  }
}

void Runner::HandleDeaths() {
  for (const Death& d : sup_.Reap()) {
    ForwardChildStderr(true, static_cast<int>(d.index));  // all it wrote before exiting
    Service& s = sup_.services()[d.index];
    const DeathVerdict v =
        OnDeath({s.name, s.restartable, s.restarts, d.status, stopping_, StopRequested(), Failed()});
    if (!v.note.empty()) progress_.Info(v.note);
    if (v.action == DeathVerdict::kFail) Fail(v.failure);
    if (v.action != DeathVerdict::kRestart) continue;
    ++s.restarts;
    sup_.Start(d.index);
  }
}

std::string HelloMismatch(const std::vector<Service>& services, const std::string& identity,
                          const std::string& service, int64_t pid) {
  const auto it = std::find_if(services.begin(), services.end(), [&](const Service& s) { return s.name == service; });
  if (it == services.end()) return "Hello from unknown service '" + service + "'";
  if (identity != service) return "Hello for '" + service + "' sent by '" + identity + "'";
  if (it->pid <= 0 || it->pid != pid)
    return "Hello from '" + service + "' with pid " + std::to_string(pid) + ", but the child started as " + service +
           " is " + (it->pid > 0 ? "pid " + std::to_string(it->pid) : std::string("not running"));
  return {};
}

}  // namespace k3::launch
