// --chat: the ChatHost the REPL (chat.h) drives, over the same loop and sockets, and the end
// of a session.
#include <signal.h>

#include "common/error.h"
#include "launcher/runner.h"

namespace k3::launch {

void Runner::Pump(std::span<zmq::pollitem_t> extra, std::chrono::milliseconds wait) {
  PumpWith(extra, Clock::now() + wait);
}

bool Runner::Terminated() const {
  return stdout_closed_ || sup_.stop_signal() == SIGTERM || sup_.stop_signal() == SIGHUP;
}

void Runner::SendCompute(const ipc::Encoded& m) { ipc::SendMessage(*compute_, m, {}, "compute"); }

// The end of a chat session: services stopped, the turns written to --out, the exit code
// (0 after /quit, end of input or Ctrl-C at the prompt; 5 after SIGTERM/SIGHUP; a service's failure).
int Runner::FinishChat(const ChatResult& chat) {
  const char* why = chat.end == ChatEnd::kTerminated ? "stop signal" : "chat ended";
  Stop(Failed() ? failure_.ending()->msg : why);
  const std::optional<Failure> fail = failure_.Final();
  if (!opt_.out.empty()) {
    try {
      WriteReportFile(opt_.out, ChatReport(chat));
    } catch (const Error&) {
      if (!fail) throw;  // the service's failure is what gets reported
    }
  }
  if (fail) throw Error(static_cast<ExitCode>(fail->code), fail->msg);
  if (chat.end == ChatEnd::kTerminated) return InterruptedExit();
  return kExitOk;
}

}  // namespace k3::launch
