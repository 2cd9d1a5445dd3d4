// The Runner behind RunPipeline (run.h): one pipeline run. Its jobs live in one file each:
//   run.cpp           the run's sequence (start, encode, generate, finish) and its exit code
//   run_spawn.cpp     arenas' endpoints, the launcher's sockets, starting the services
//   run_control.cpp   Hello / Ready / Stats / Dead and deaths (decisions: failure_policy.h)
//   run_loop.cpp      one poll round: sockets, deaths, the services' stderr (stderr_lines.h)
//   run_generate.cpp  the one-shot Generate / Token / Done (one_shot.h), the prompt's
//                     encoding, the decoded text through --stop, state-file round trips
//   run_stop.cpp      Shutdown, the wait, SIGTERM/SIGKILL (run_end.h); the report
//   run_serve.cpp     --serve: relays to k3-server and the supervision loop
//   run_chat.cpp      --chat: the ChatHost the REPL drives, and the session's end
// Internal to launcher/.
#pragma once
#include <chrono>
#include <deque>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "common/ipc/messages.h"
#include "common/ipc/protocol.h"
#include "common/ipc/zmq_channel.h"
#include "common/stop_text.h"
#include "common/ipc/tokenizer_client.h"
#include "launcher/chat.h"
#include "launcher/failure_policy.h"
#include "launcher/memory_peaks.h"
#include "launcher/one_shot.h"
#include "launcher/progress.h"
#include "launcher/report.h"
#include "launcher/run.h"
#include "launcher/run_resources.h"
#include "launcher/stats_progress.h"
#include "launcher/stderr_lines.h"
#include "launcher/supervisor.h"

namespace k3::launch {

class Runner : public ChatHost {
 public:
  using Clock = std::chrono::steady_clock;
  Runner(const LaunchOptions& opt, const ModelLayout& m, const plan::MemoryPlan& p, const PromptInput& in);
  int Run();

  // ChatHost (--chat, chat.h): the REPL drives the same loop (run_chat.cpp).
  void Pump(std::span<zmq::pollitem_t> extra, std::chrono::milliseconds wait) override;
  bool Failed() const override { return failure_.failed(); }
  bool TakeInterrupt() override { return sup_.TakeSigint(); }
  bool Terminated() const override;
  void SendCompute(const ipc::Encoded& m) override;
  std::deque<ipc::compute::Message>& ComputeInbox() override { return chat_inbox_; }
  void Out(const std::string& s) override;  // generated ids / text to stdout
  void Note(const std::string& s) override { progress_.Always(s); }
  void InputLineEnded() override { progress_.AfterStdout(true); }
  zmq::context_t& Context() override { return ctx_; }
  std::string TokenizerEndpoint() const override { return tokenizer_endpoint_; }

 private:
  // run_spawn.cpp
  RunEndpoints OpenSockets();
  void Spawn(const RunEndpoints& ep, bool tokenizer_only);
  void StartRest();  // every service Spawn did not start
  // run_loop.cpp
  bool Pump(Clock::time_point deadline) { return PumpWith({}, deadline); }  // one poll round; false on timeout
  bool PumpWith(std::span<zmq::pollitem_t> extra, Clock::time_point deadline);
  void DrainSockets();
  void ForwardChildStderr(bool flush, int only = -1);
  // run_control.cpp
  void HandleControl(const ipc::Received<ipc::control::Message>& r);
  void HandleDeaths();
  void OnStats(const std::string& service);
  // run_generate.cpp
  void HandleCompute(const ipc::Received<ipc::compute::Message>& r);
  void SendGenerate(const std::vector<int32_t>& ids);
  bool SendToCompute(const ipc::Encoded& msg);  // false: gave up (a failure or a stop)
  // One StateOp and its StateDone; nullopt when the run failed or was stopped meanwhile.
  std::optional<ipc::compute::StateDone> StateRoundTrip(ipc::compute::StateAction action, const std::string& path);
  void SendCancel();  // a --stop text was found: compute ends the request at its next step
  std::vector<int32_t> EncodePrompt();  // through the tokenizer service
  void PrintText();                     // decoded text so far through the --stop matcher
  void FlushText();                     // waits for the end of the decode stream
  // run_stop.cpp
  void Stop(const std::string& reason);
  RunRecord Record(const std::vector<int32_t>& ids, bool interrupted, const std::string& reason) const;
  int FinishOneShot(const std::vector<int32_t>& ids);
  // run_serve.cpp
  bool Serving() const { return !opt_.serve.empty(); }
  void RelayToServer(const ipc::Encoded& m);  // serve mode: what /health and /metrics need
  void RelayReadyToServer();
  int Serve();                                // serve mode: supervise until a stop or a failure
  // run_chat.cpp
  int FinishChat(const ChatResult& chat);

  bool StopRequested() const { return sup_.interrupted() || stdout_closed_; }
  void Fail(Failure f) { failure_.Fail(std::move(f)); }
  int InterruptedExit();  // the last line of a requested stop; kExitInterrupted

  const LaunchOptions& opt_;
  const ModelLayout& m_;
  const plan::MemoryPlan& plan_;
  const PromptInput& in_;
  ProgressLine progress_;
  Supervisor sup_;
  std::optional<RunResources> res_;  // arenas + endpoint names (run_resources.h)
  zmq::context_t ctx_{1};
  std::optional<zmq::socket_t> control_, compute_;
  std::optional<ipc::TokenizerClient> tok_;  // when a tokenizer is configured
  std::string tokenizer_endpoint_;
  ipc::RejectCounter rejects_;
  bool hello_mismatch_logged_ = false;
  std::map<std::string, std::map<std::string, double>> stats_;  // service -> latest Stats
  StatsProgress stats_progress_;
  MemoryPeaks peaks_;
  std::map<std::string, StderrLines> stderr_;  // per service: its unfinished stderr line
  OneShot one_shot_;
  const std::vector<int32_t> stop_ids_;  // Generate.stop_ids: end ids + --stop-id(s), sorted
  StopTextMatcher stop_text_;            // --stop strings over the decoded text
  std::string shown_text_;               // the decoded text without end ids and --stop strings
  bool cancel_sent_ = false;
  std::optional<ipc::compute::StateDone> state_done_;  // the answer to the last StateOp
  int64_t state_loaded_tokens_ = -1;
  std::string state_saved_;
  RunFailure failure_;                 // which failure is the run's (failure_policy.h)
  bool stopping_ = false;              // Shutdown sent: exits now are expected
  bool stopped_ = false;               // Stop ran (serve mode stops before it throws)
  bool stdout_closed_ = false;         // stdout's reader went away (| head): a requested stop
  Clock::time_point t0_ = Clock::now();
  double run_seconds_ = 0;
  bool chat_active_ = false;  // --chat: compute's messages go to the REPL's inbox
  std::deque<ipc::compute::Message> chat_inbox_;
};

}  // namespace k3::launch
