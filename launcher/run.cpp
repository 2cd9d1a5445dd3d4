#include "run.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <zmq.hpp>

#include "common/end_ids.h"
#include "common/error.h"
#include "common/ipc/protocol.h"
#include "common/ipc/shm_arena.h"
#include "common/ipc/slot_table.h"
#include "common/ipc/zmq_channel.h"
#include "common/stdout_writer.h"
#include "launcher/chat.h"
#include "launcher/run_resources.h"
#include "common/stop_text.h"
#include "launcher/tokenizer_client.h"
#include "proc_stats.h"
#include "progress.h"
#include "report.h"
#include "supervisor.h"

namespace k3::launch {
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

// The one Generate of a run; Tokens and Done name it.
constexpr uint64_t kGenerateId = 1;
constexpr uint64_t kStateOpId = 2;  // the state-file operations (--load-state, --save-state)

std::string SelfDir() {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec) throw RuntimeFailure("cannot locate k3-launch: " + ec.message());
  return exe.parent_path().string();
}

const char* SignalName(int sig) {
  switch (sig) {
    case SIGINT: return "SIGINT";
    case SIGTERM: return "SIGTERM";
    case SIGHUP: return "SIGHUP";
    default: return "a signal";
  }
}

// Exit codes a service can report (docs/exit-codes.md); anything else counts as a runtime failure.
int KnownCode(int code) { return code >= 1 && code <= 7 ? code : kExitRuntime; }

// Why the run ends badly: an exit code and the one-line reason "<service>: <reason>".
struct Failure {
  int code = kExitRuntime;
  std::string service;
  std::string msg;
};

class Runner : public ChatHost {
 public:
  Runner(const LaunchOptions& opt, const ModelLayout& m, const plan::MemoryPlan& p, const PromptInput& in)
      : opt_(opt), m_(m), plan_(p), in_(in), progress_(ProgressLine::ForStdio(opt.quiet)),
        stop_ids_(MergeIds(in.end_ids, opt.stop_ids)), stop_text_(opt.stop) {}
  int Run();

  // ChatHost (--chat, chat.h): the REPL drives the same loop.
  void Pump(std::span<zmq::pollitem_t> extra, std::chrono::milliseconds wait) override {
    PumpWith(extra, Clock::now() + wait);
  }
  bool Failed() const override { return failure_.has_value(); }
  bool TakeInterrupt() override { return sup_.TakeSigint(); }
  bool Terminated() const override {
    return stdout_closed_ || sup_.stop_signal() == SIGTERM || sup_.stop_signal() == SIGHUP;
  }
  void SendCompute(const ipc::Encoded& m) override { ipc::SendMessage(*compute_, m, {}, "compute"); }
  std::deque<ipc::compute::Message>& ComputeInbox() override { return chat_inbox_; }
  void Out(const std::string& s) override;  // generated ids / text to stdout
  void Note(const std::string& s) override { progress_.Always(s); }
  void InputLineEnded() override { progress_.AfterStdout(true); }
  zmq::context_t& Context() override { return ctx_; }
  std::string TokenizerEndpoint() const override { return tokenizer_endpoint_; }

 private:
  void Spawn(const RunEndpoints& ep, bool tokenizer_only);
  void StartRest();  // every service Spawn did not start
  bool Pump(Clock::time_point deadline) { return PumpWith({}, deadline); }  // one poll round; false on timeout
  bool PumpWith(std::span<zmq::pollitem_t> extra, Clock::time_point deadline);
  int FinishChat(const ChatResult& chat);
  void DrainSockets();
  void HandleControl(const ipc::Received<ipc::control::Message>& r);
  void HandleCompute(const ipc::Received<ipc::compute::Message>& r);
  void HandleDeaths();
  void ForwardChildStderr(bool flush, int only = -1);
  void SendGenerate(const std::vector<int32_t>& ids);
  bool SendToCompute(const ipc::Encoded& msg);  // false: gave up (a failure or a stop)
  // One StateOp and its StateDone; nullopt when the run failed or was stopped meanwhile.
  std::optional<ipc::compute::StateDone> StateRoundTrip(ipc::compute::StateAction action, const std::string& path);
  void SendCancel();  // a --stop text was found: compute ends the request at its next step
  void Stop(const std::string& reason);
  void SampleMemory();
  void Fail(Failure f);
  std::optional<Failure> FinalFailure() const;
  bool StopRequested() const { return sup_.interrupted() || stdout_closed_; }
  RunRecord Record(const std::vector<int32_t>& ids, bool interrupted, const std::string& reason) const;
  std::vector<int32_t> EncodePrompt();  // through the tokenizer service
  void PrintText();                     // decoded text so far through the --stop matcher
  void FlushText();                     // waits for the end of the decode stream
  bool HintsSent() const { return HintsOffReason(opt_, m_, plan_) == nullptr; }
  void OnStats(const std::string& service);
  bool Serving() const { return !opt_.serve.empty(); }
  void RelayToServer(const ipc::Encoded& m);  // serve mode: what /health and /metrics need
  void RelayReadyToServer();
  int Serve();                                // serve mode: supervise until a stop or a failure

  const LaunchOptions& opt_;
  const ModelLayout& m_;
  const plan::MemoryPlan& plan_;
  const PromptInput& in_;
  ProgressLine progress_;
  Supervisor sup_;
  std::optional<RunResources> res_;  // arenas + endpoint names (run_resources.h)
  zmq::context_t ctx_{1};
  std::optional<zmq::socket_t> control_, compute_;
  std::optional<TokenizerClient> tok_;  // when a tokenizer is configured
  ipc::RejectCounter rejects_;
  bool hello_mismatch_logged_ = false;
  std::map<std::string, std::map<std::string, double>> stats_;  // service -> latest Stats
  std::map<std::string, ProcMemory> peak_;
  std::map<std::string, std::string> stderr_partial_;  // per service: its unfinished stderr line
  std::vector<int32_t> generated_;
  const std::vector<int32_t> stop_ids_;  // Generate.stop_ids: end ids + --stop-id(s), sorted
  StopTextMatcher stop_text_;            // --stop strings over the decoded text
  std::string shown_text_;               // the decoded text without end ids and --stop strings
  bool cancel_sent_ = false;
  std::vector<ipc::compute::Token> token_logprobs_;  // --logprobs: each Token as it arrived
  size_t prompt_sent_ = 0;  // ids in the Generate
  std::vector<Clock::time_point> token_arrivals_;  // when each generated token reached the launcher
  std::optional<ipc::compute::RunStats> done_;
  std::optional<ipc::compute::StopReason> finish_reason_;  // Done.reason
  std::optional<ipc::compute::StateDone> state_done_;      // the answer to the last StateOp
  int64_t state_loaded_tokens_ = -1;
  std::string state_saved_;
  std::optional<Failure> first_dead_;  // the first Dead received: the root cause, preferred
  std::optional<Failure> failure_;     // what ended the run (a death, a Dead, a timeout)
  bool stopping_ = false;              // Shutdown sent: exits now are expected
  bool stopped_ = false;               // Stop ran (serve mode stops before it throws)
  bool stdout_closed_ = false;         // stdout's reader went away (| head): a requested stop
  Clock::time_point t0_ = Clock::now(), t_generate_ = Clock::now();
  bool pin_reported_ = false, prefill_reported_ = false;
  double run_seconds_ = 0;
  bool chat_active_ = false;  // --chat: compute's messages go to the REPL's inbox
  std::deque<ipc::compute::Message> chat_inbox_;
  std::string tokenizer_endpoint_;
};

// With `tokenizer_only` only the tokenizer starts (a text prompt is encoded and its length
// checked before any weight service starts pinning); StartRest starts the others.
void Runner::Spawn(const RunEndpoints& ep, bool tokenizer_only) {
  for (ServiceCommand& c : ServiceCommandLines(opt_, m_, plan_, ep, in_.tokenizer_dir)) {
    Service s{c.name, std::move(c.argv), c.restartable};
    // Every service's stderr comes through the launcher, a whole line at a time, so their
    // lines never split one another, the live progress line, or the launcher's last line.
    s.capture_stderr = true;
    sup_.Add(std::move(s));
  }
  if (Serving()) {
    std::vector<std::string> others;
    for (const Service& s : sup_.services()) others.push_back(s.name);
    ServiceCommand c = ServerCommandLine(opt_, m_, ep, stop_ids_, others);
    Service s{c.name, std::move(c.argv), c.restartable};
    s.capture_stderr = true;
    sup_.Add(std::move(s));
  }
  for (const Service& s : sup_.services())
    if (::access(s.argv[0].c_str(), X_OK) != 0)
      throw RuntimeFailure("cannot start " + s.name + ": " + s.argv[0] + " is missing");
  for (Service& s : sup_.services()) s.inherit_fds = res_->FdsNamedIn(s.argv);
  for (Service& s : sup_.services()) s.inherit_fds = res_->FdsNamedIn(s.argv);
  for (size_t i = 0; i < sup_.services().size(); ++i)
    if (!tokenizer_only || sup_.services()[i].name == "tokenizer") sup_.Start(i);
}

void Runner::StartRest() {
  for (size_t i = 0; i < sup_.services().size(); ++i)
    if (sup_.services()[i].pid <= 0 && !sup_.services()[i].ready) sup_.Start(i);
}

void Runner::Fail(Failure f) {
  if (!failure_) failure_ = std::move(f);
}

// The first service that told us why it died is the root cause; later deaths (compute losing
// its fetcher, say) are consequences. Without any Dead, what ended the run.
std::optional<Failure> Runner::FinalFailure() const {
  if (!failure_) return std::nullopt;
  if (first_dead_) return first_dead_;
  return failure_;
}

void Runner::OnStats(const std::string& service) {
  const auto& st = stats_[service];
  auto get = [&](const char* k) {
    auto it = st.find(k);
    return it == st.end() ? -1.0 : it->second;
  };
  const double secs = std::chrono::duration<double>(Clock::now() - t0_).count();
  if (service == "trunk-reader" && get("pin_bytes_total") > 0 && !pin_reported_) {
    const double done = get("pin_bytes_done"), total = get("pin_bytes_total");
    // The reader's own clock when it sends one (reads only, not its start-up).
    const std::string text = ProgressText("pinning trunk", done, total, get("pin_seconds") > 0 ? get("pin_seconds") : secs, true);
    if (done >= total) {
      pin_reported_ = true;
      progress_.Info(text);
    } else {
      progress_.Show(text);
    }
  }
  if (service == "compute" && get("prefill_tokens_total") > 0 && !prefill_reported_) {
    const double done = get("prefill_tokens_done"), total = get("prefill_tokens_total");
    const double s = std::chrono::duration<double>(Clock::now() - t_generate_).count();
    const std::string text = ProgressText("prefill", done, total, s, false);
    if (chat_active_) {  // every turn has its prefill: a live line only
      if (done >= total) progress_.Clear();
      else progress_.Show(text);
    } else if (done >= total) {
      prefill_reported_ = true;
      progress_.Info(text);
    } else {
      progress_.Show(text);
    }
  }
}

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
          if (first_dead_ && first_dead_->service == msg.service && !failure_) first_dead_.reset();
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
          // Exit 5 while we stop it is the stop we asked for.
          if (msg.exit_code == 0 || (stopping_ && msg.exit_code == kExitInterrupted)) return;
          if (stopping_ && msg.service == "compute" && StopRequested()) return;
          Failure f{KnownCode(msg.exit_code), msg.service, msg.service + ": " + msg.reason};
          if (!first_dead_) first_dead_ = f;
          const auto& svcs = sup_.services();
          const auto it = std::find_if(svcs.begin(), svcs.end(), [&](const Service& s) { return s.name == msg.service; });
          // Restarting helps only a service that had come up and then failed at run time (exit 1)
          // or was stopped by someone else's signal (5); at start-up, for compute, while
          // stopping or with any other code (bad model, output, input) it ends the run.
          const bool restart_helps = it != svcs.end() && it->restartable && it->ready &&
                                     (f.code == kExitRuntime || f.code == kExitInterrupted);
          if (stopping_ || !restart_helps) Fail(f);
        }
      },
      r.message);
}

void Runner::HandleCompute(const ipc::Received<ipc::compute::Message>& r) {
  if (chat_active_) {
    chat_inbox_.push_back(r.message);
    return;
  }
  if (const auto* t = std::get_if<ipc::compute::Token>(&r.message)) {
    if (t->request_id != kGenerateId || t->index != static_cast<int32_t>(generated_.size())) return;
    generated_.push_back(t->id);
    if (opt_.logprobs >= 0) token_logprobs_.push_back(*t);
    token_arrivals_.push_back(Clock::now());
    // Text leaves out the id that ends the run (an end id or --stop-id) and all after a --stop.
    const bool ends = std::binary_search(stop_ids_.begin(), stop_ids_.end(), t->id);
    if (tok_ && !ends && !stop_text_.matched()) tok_->PushIds({t->id});
    if (!(tok_ && in_.has_text)) Out(std::to_string(t->id) + "\n");  // ids in, ids out
    if (token_arrivals_.size() >= 2) {
      const double s = std::chrono::duration<double>(token_arrivals_.back() - token_arrivals_.front()).count();
      progress_.Show(ProgressText("decoding", static_cast<double>(generated_.size() - 1),
                                  static_cast<double>(std::max<int64_t>(opt_.gen - 1, 1)), s, false));
    }
  } else if (const auto* s = std::get_if<ipc::compute::StateDone>(&r.message)) {
    if (s->request_id == kStateOpId) state_done_ = *s;
  } else if (const auto* d = std::get_if<ipc::compute::Done>(&r.message)) {
    if (d->request_id != kGenerateId) return;
    done_ = d->stats;
    // Compute's own counts against what arrived here: a difference means Tokens were lost.
    if (d->stats.generated_tokens != static_cast<int32_t>(generated_.size()) ||
        d->stats.prompt_tokens != static_cast<int32_t>(prompt_sent_))
      progress_.Always("[launch] warning: compute generated " + std::to_string(d->stats.generated_tokens) +
                       " tokens for a prompt of " + std::to_string(d->stats.prompt_tokens) + ", but " +
                       std::to_string(generated_.size()) + " arrived for a prompt of " +
                       std::to_string(prompt_sent_));
    finish_reason_ = d->reason;
  }
}

void Runner::HandleDeaths() {
  for (const Death& d : sup_.Reap()) {
    ForwardChildStderr(true, static_cast<int>(d.index));  // all it wrote before exiting
    Service& s = sup_.services()[d.index];
    const int status = d.status;
    std::string what = WIFSIGNALED(status) ? "killed by signal " + std::to_string(WTERMSIG(status))
                                           : "exited with status " + std::to_string(WEXITSTATUS(status));
    if (stopping_) {
      // Ending on the Shutdown (0), on a stop signal (5, or killed by our SIGTERM) is expected;
      // so is however compute ends when we cut its generation short.
      const bool expected = WIFSIGNALED(status)
                                ? (WTERMSIG(status) == SIGTERM || WTERMSIG(status) == SIGKILL)
                                : (WEXITSTATUS(status) == 0 || WEXITSTATUS(status) == kExitInterrupted);
      const bool ok = (s.name == "compute" && StopRequested()) || expected;
      if (!ok) Fail({WIFEXITED(status) ? KnownCode(WEXITSTATUS(status)) : kExitRuntime, s.name,
                     s.name + ": " + what + " while stopping"});
      continue;
    }
    if (failure_) continue;
    // The same Ctrl-C reached the service (one process group): its exit 5 is this stop.
    if (StopRequested() && WIFEXITED(status) && WEXITSTATUS(status) == kExitInterrupted) continue;
    if (s.name == "compute" || !s.restartable) {
      progress_.Info("[launch] " + s.name + " " + what);
      Fail({kExitRuntime, s.name, s.name + ": " + what});
      continue;
    }
    if (s.restarts >= 5) {
      Fail({kExitRuntime, s.name, s.name + ": " + what + " (restarted 5 times already)"});
      continue;
    }
    ++s.restarts;
    progress_.Info("[launch] " + s.name + " " + what + "; restarting it");
    sup_.Start(d.index);
  }
}

// The services' stderr, line by line (a partial line waits for its end, or for the service's
// exit: `flush`). Quiet mode passes on only their error lines ("k3-...: ", anything that is not
// a "[service] ..." progress or stats line).
void Runner::ForwardChildStderr(bool flush, int only) {
  for (size_t i = 0; i < sup_.services().size(); ++i) {
    Service& s = sup_.services()[i];
    if (s.stderr_fd < 0 || (only >= 0 && static_cast<size_t>(only) != i)) continue;
    std::string& buf = stderr_partial_[s.name];
    char chunk[4096];
    for (;;) {
      const ssize_t n = ::read(s.stderr_fd, chunk, sizeof chunk);
      if (n > 0) buf.append(chunk, static_cast<size_t>(n));
      else if (n < 0 && errno == EINTR) continue;
      else break;
    }
    size_t nl;
    while ((nl = buf.find('\n')) != std::string::npos) {
      const std::string line = buf.substr(0, nl);
      buf.erase(0, nl + 1);
      if (!(opt_.quiet || chat_active_) || (!line.empty() && line[0] != '[')) progress_.Always(line);
    }
    if ((flush || buf.size() > 65536) && !buf.empty()) {
      if (!(opt_.quiet || chat_active_) || buf[0] != '[') progress_.Always(buf);
      buf.clear();
    }
  }
}

void Runner::DrainSockets() {
  const auto now = Clock::now();
  while (auto r = ipc::ReceiveVerified(*control_, true, ipc::DecodeControl, now, rejects_)) HandleControl(*r);
  while (auto r = ipc::ReceiveVerified(*compute_, true, ipc::DecodeCompute, now, rejects_)) HandleCompute(*r);
  if (tok_) {
    tok_->Drain(rejects_);
    PrintText();
  }
}

// `extra`: more items to poll (the chat's terminal and tokenizer socket); revents set.
bool Runner::PumpWith(std::span<zmq::pollitem_t> extra, Clock::time_point deadline) {
  std::vector<zmq::pollitem_t> items = {{control_->handle(), 0, ZMQ_POLLIN, 0},
                                        {compute_->handle(), 0, ZMQ_POLLIN, 0},
                                        {nullptr, sup_.wake_fd(), ZMQ_POLLIN, 0},
                                        {tok_ ? tok_->socket().handle() : nullptr, -1, ZMQ_POLLIN, 0}};
  const size_t base = tok_ ? 4 : 3;
  items.resize(base);
  items.insert(items.end(), extra.begin(), extra.end());
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  const long ms = std::clamp<long>(static_cast<long>(left.count()), 0, 200);
  ipc::Poll(items.data(), items.size(), std::chrono::milliseconds(ms));  // a signal is a wake-up
  for (size_t i = 0; i < extra.size(); ++i) extra[i].revents = items[base + i].revents;
  if (items[2].revents & ZMQ_POLLIN) sup_.DrainWake();
  // Messages first: a Dead sent just before exiting is the reason for the exit seen next.
  DrainSockets();
  HandleDeaths();
  ForwardChildStderr(false);
  return Clock::now() < deadline;
}

void Runner::Out(const std::string& s) {
  if (stdout_closed_ || s.empty()) return;
  progress_.BeforeStdout();
  const StdoutWrite w = WriteStdout(s);
  if (w != StdoutWrite::kOk) {
    stdout_closed_ = true;  // closed: the reader is gone (| head), stop like Ctrl-C, quietly
    if (w == StdoutWrite::kFailed) Fail({kExitOutput, "stdout", std::string("stdout: ") + std::strerror(errno)});
  }
  progress_.AfterStdout(s.back() == '\n');
}

void Runner::SendGenerate(const std::vector<int32_t>& ids) {
  ipc::compute::Generate g;
  g.request_id = kGenerateId;
  prompt_sent_ = ids.size();
  g.ids = ids;
  g.gen = static_cast<int32_t>(opt_.gen);
  g.full_recompute = opt_.full_recompute;
  g.prefill_chunk = static_cast<int32_t>(opt_.prefill_chunk);
  g.stop_ids = stop_ids_;
  g.keep_state = !opt_.load_state.empty();  // appended to the loaded sequence
  g.max_positions = static_cast<int32_t>(std::min<int64_t>(opt_.context, INT32_MAX));
  g.sampling = opt_.sampling;
  g.logprobs = opt_.logprobs;
  g.perplexity = opt_.perplexity;
  g.spec = static_cast<int32_t>(opt_.spec);
  t_generate_ = Clock::now();
  SendToCompute(ipc::Encode(g));
}

bool Runner::SendToCompute(const ipc::Encoded& msg) {
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  for (;;) {  // the compute DEALER may not be known to the ROUTER yet (ROUTER_MANDATORY)
    try {
      ipc::SendMessage(*compute_, msg, {}, "compute");
      return true;
    } catch (const Error&) {
      if (Clock::now() > deadline) throw RuntimeFailure("compute never connected to the compute endpoint");
      Pump(Clock::now() + std::chrono::milliseconds(20));
      if (failure_ || StopRequested()) return false;
    }
  }
}

std::optional<ipc::compute::StateDone> Runner::StateRoundTrip(ipc::compute::StateAction action,
                                                              const std::string& path) {
  ipc::compute::StateOp op;
  op.request_id = kStateOpId;
  op.action = action;
  op.path = fs::absolute(path).string();  // compute's working directory need not be ours
  state_done_.reset();
  if (!SendToCompute(ipc::Encode(op))) return std::nullopt;
  // Loading or writing a file: its size over the disk's speed, plus the checksum.
  while (!state_done_ && !failure_ && !StopRequested()) Pump(Clock::now() + std::chrono::milliseconds(200));
  return state_done_;
}

void Runner::SendCancel() {
  if (cancel_sent_ || done_) return;
  cancel_sent_ = true;
  try {
    ipc::SendMessage(*compute_, ipc::Encode(ipc::compute::Cancel{kGenerateId}), {}, "compute");
  } catch (const Error&) {
    // compute is gone: its death is handled as any other
  }
}

void Runner::SampleMemory() {
  for (const Service& s : sup_.services()) {
    if (s.pid <= 0) continue;
    const ProcMemory m = ReadProcMemory(s.pid);
    ProcMemory& p = peak_[s.name];
    p.vm_hwm = std::max(p.vm_hwm, m.vm_hwm);
    p.rss_shmem = std::max(p.rss_shmem, m.rss_shmem);
  }
  const ProcMemory self = ReadProcMemory(::getpid());
  peak_["launcher"] = self;
}

// Shutdown to every service, then wait for them to exit while still taking their messages
// (final Stats, compute's Done, a Dead about an output that could not be written) and exit
// statuses. Every service gets Shutdown at once; for a requested stop (signal, closed stdout)
// the wait is 1.2 s at most (compute reaches a safe point within 1 s), then SIGTERM (0.3 s).
void Runner::Stop(const std::string& reason) {
  stopped_ = true;
  SampleMemory();
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
  auto wait = [&](Clock::time_point deadline) {
    while (sup_.AnyRunning() && Clock::now() < deadline)
      Pump(std::min(deadline, Clock::now() + std::chrono::milliseconds(20)));
  };
  // Compute stops at a safe point within 1 s without the weight services (it looks for the
  // stop while it waits for weights too), so they stop together and the weight services get
  // the whole window to send their final Stats.
  const bool requested = StopRequested();
  const double grace = requested ? std::min(opt_.shutdown_timeout, 1.2) : opt_.shutdown_timeout;
  wait(Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(grace * 1000)));
  sup_.KillAll(std::chrono::milliseconds(requested ? 300 : 2000));
  // What the services sent right before exiting may still be on its way.
  Pump(Clock::now() + std::chrono::milliseconds(30));
  DrainSockets();
  ForwardChildStderr(true);
  progress_.Clear();
  progress_.FinishText();  // nothing more goes to stdout
}

void Runner::PrintText() {
  const std::string t = tok_->TakeNewText();
  if (t.empty()) return;
  const std::string shown = stop_text_.Feed(t);
  if (stop_text_.matched()) SendCancel();
  shown_text_ += shown;
  if (in_.has_text) Out(shown);
}

std::vector<int32_t> Runner::EncodePrompt() {
  tok_->StartEncode(in_.text);
  const auto deadline = Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(opt_.ready_timeout * 1000));
  while (!tok_->encoded() && tok_->failure().empty() && !failure_ && !StopRequested())
    if (!Pump(deadline)) throw RuntimeFailure("the tokenizer did not encode the prompt in time");
  if (!tok_->failure().empty()) throw BadInput("tokenizer: " + tok_->failure());
  if (!tok_->encoded()) return {};  // failed or interrupted: the caller stops
  const std::vector<int32_t> ids = *tok_->encoded();
  if (ids.empty()) throw BadInput("the prompt encodes to no tokens");
  for (int32_t id : ids)
    if (id < 0 || id >= m_.cfg.vocab_size)
      throw BadInput("tokenizer id " + std::to_string(id) + " is outside the model's vocabulary [0," +
                     std::to_string(m_.cfg.vocab_size) + ")");
  progress_.Info("[launch] prompt: " + std::to_string(ids.size()) + " tokens");
  return ids;
}

void Runner::FlushText() {
  tok_->FinishStream();
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  while (!tok_->stream_done() && tok_->failure().empty() && !failure_ && !StopRequested())
    if (!Pump(deadline)) break;
  if (tok_->stream_done()) {
    PrintText();
    const std::string rest = stop_text_.Finish();  // a held-back start of a --stop that never completed
    shown_text_ += rest;
    if (in_.has_text) Out(rest);
  }
  if (!tok_->failure().empty())
    progress_.Always("[launch] warning: generated ids not decoded: " + tok_->failure());
  else if (!tok_->stream_done())
    progress_.Always("[launch] warning: the tokenizer did not finish decoding in time");
}

RunRecord Runner::Record(const std::vector<int32_t>& ids, bool interrupted, const std::string& reason) const {
  RunRecord r;
  r.prompt_ids = ids;
  r.generated_ids = generated_;
  for (size_t i = 1; i < token_arrivals_.size(); ++i)
    r.token_seconds.push_back(std::chrono::duration<double>(token_arrivals_[i] - token_arrivals_[i - 1]).count());
  r.done = done_;
  r.finish_reason = finish_reason_;
  r.run_seconds = run_seconds_;
  r.service_stats = stats_;
  r.peak = peak_;
  for (const Service& s : sup_.services()) r.restarts[s.name] = s.restarts;
  r.rejected_messages = rejects_.rejected;
  if (tok_ && tok_->stream_done()) r.generated_text = shown_text_;
  if (stop_text_.matched()) r.stop_text = stop_text_.matched_stop();
  if (tok_) r.tokenizer_error = tok_->failure();
  r.expert_inputs = opt_.expert_inputs;
  r.expert_servers = opt_.expert_server;
  r.prefetch_hints = HintsSent();
  r.interrupted = interrupted;
  r.stop_reason = reason;
  r.state_loaded_tokens = state_loaded_tokens_;
  r.state_saved = state_saved_;
  r.sampling = opt_.sampling;
  if (opt_.logprobs >= 0) r.logprobs = token_logprobs_;
  r.perplexity = opt_.perplexity;
  return r;
}

int Runner::Run() {
  std::vector<int32_t> ids = in_.ids;
  ipc::CleanupDeadLaunchers();  // /dev/shm names left by k3 versions before memfd arenas
  res_.emplace(SizeArenas(m_, plan_));  // nothing of it outlives the run (run_resources.h)
  RunEndpoints ep = EndpointsIn(res_->ipc_name(), SelfDir());
  ep.pinned_arena = res_->pinned.Spec();
  ep.ring_arena = res_->ring.Spec();
  ep.experts_arena = res_->experts.Spec();
  if (res_->embed_window) ep.embed_arena = res_->embed_window->Spec();

  control_.emplace(ctx_, zmq::socket_type::router);
  compute_.emplace(ctx_, zmq::socket_type::router);
  for (auto* s : {&*control_, &*compute_}) {
    s->set(zmq::sockopt::router_mandatory, 1);
    s->set(zmq::sockopt::router_handover, 1);  // a restarted service takes over its identity
    s->set(zmq::sockopt::linger, 0);
  }
  ipc::BindPrivate(*control_, ep.control);
  if (!Serving()) ipc::BindPrivate(*compute_, ep.compute);  // serving: k3-server binds it, compute's client
  if (!in_.tokenizer_dir.empty()) tok_.emplace(ctx_, ep.tokenizer);
  tokenizer_endpoint_ = ep.tokenizer;

  // k3-server reads the key from its environment, which other users cannot read (argv they can).
  if (Serving() && !opt_.api_key.empty()) ::setenv("K3_API_KEY", opt_.api_key.c_str(), 1);
  else ::unsetenv("K3_API_KEY");
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
      while (!tok_ready() && !failure_ && !StopRequested())
        if (!Pump(ready_deadline)) throw not_ready();
      if (!failure_ && !StopRequested()) ids = EncodePrompt();
      // A loaded state's ids count too (main.cpp checked id prompts the same way).
      const int64_t held = std::max<int64_t>(0, in_.state_tokens) + static_cast<int64_t>(ids.size());
      if (held > opt_.context) throw UsageError(PromptTooLong(held, opt_.context));
      if (!failure_ && !StopRequested()) StartRest();
    }
    while (!all_ready() && !failure_ && !StopRequested())
      if (!Pump(ready_deadline)) throw not_ready();
    if (!failure_ && !StopRequested()) {
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
      for (int32_t id : stop_ids_) stops += (stops.empty() ? "" : ",") + std::to_string(id);
      progress_.Info("[launch] stop ids: " + (stops.empty() ? std::string("none") : stops) +
                     (opt_.ignore_eos ? " (--ignore-eos)" : ""));
      if (!opt_.load_state.empty() && !ids.empty() && !failure_ && !StopRequested()) {
        // main.cpp checked the file; compute checks it again as it loads it (same rules).
        const auto s = StateRoundTrip(ipc::compute::StateAction::kLoad, opt_.load_state);
        if (s && !s->ok) throw BadInput("--load-state: " + s->error);
        if (s) state_loaded_tokens_ = s->position;
      }
      if (!ids.empty() && !failure_ && !StopRequested()) SendGenerate(ids);
    }
    const auto t1 = Clock::now();
    auto last_sample = Clock::now();
    while (!done_ && !failure_ && !StopRequested()) {
      Pump(Clock::now() + std::chrono::milliseconds(200));
      if (Clock::now() - last_sample > std::chrono::milliseconds(250)) {
        SampleMemory();
        last_sample = Clock::now();
      }
    }
    run_seconds_ = std::chrono::duration<double>(Clock::now() - t1).count();
    if (done_) {
      // Compute sends its Stats right before Done; give the message a moment to arrive.
      Pump(Clock::now() + std::chrono::milliseconds(50));
      if (tok_) FlushText();
    }
    if (done_ && !opt_.save_state.empty() && finish_reason_ != ipc::compute::StopReason::kInterrupted &&
        !failure_ && !StopRequested()) {
      const auto s = StateRoundTrip(ipc::compute::StateAction::kSave, opt_.save_state);
      if (s && !s->ok) throw Error(kExitOutput, "--save-state: " + s->error);
      if (s) state_saved_ = opt_.save_state;
    }
  } catch (const Error& e) {
    if (!stopped_) Stop(e.what());
    throw;
  }
  // A Done that says compute was interrupted (it saw the same Ctrl-C) is still a requested stop.
  const bool requested =
      StopRequested() && (!done_ || finish_reason_ == ipc::compute::StopReason::kInterrupted);
  const std::string stop_reason = !requested       ? (failure_ ? failure_->msg : "run finished")
                                  : stdout_closed_ ? "stdout closed"
                                                   : std::string("interrupted by ") + SignalName(sup_.stop_signal());
  Stop(stop_reason);
  if (requested && run_seconds_ == 0) run_seconds_ = std::chrono::duration<double>(Clock::now() - t_generate_).count();

  const std::optional<Failure> fail = FinalFailure();
  if (done_ || requested) {
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
  if (requested) {
    if (!stdout_closed_)
      progress_.Always(std::string("k3-launch: interrupted by ") + SignalName(sup_.stop_signal()) +
                       "; services stopped");
    return kExitInterrupted;
  }
  return kExitOk;
}

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

// Serve mode: k3-server is compute's client; the launcher supervises (restarts, deaths,
// stderr) until a stop signal or a failure, then stops every service.
int Runner::Serve() {
  progress_.Info(std::string("[launch] all services ready in ") +
                 std::to_string(std::chrono::duration<double>(Clock::now() - t0_).count()).substr(0, 4) +
                 " s; serving at http://" + opt_.serve + " (Ctrl-C stops)");
  while (!failure_ && !StopRequested()) Pump(Clock::now() + std::chrono::milliseconds(200));
  const std::string reason = failure_ ? failure_->msg : std::string("interrupted by ") + SignalName(sup_.stop_signal());
  Stop(reason);
  if (const std::optional<Failure> fail = FinalFailure()) throw Error(static_cast<ExitCode>(fail->code), fail->msg);
  progress_.Always(std::string("k3-launch: interrupted by ") + SignalName(sup_.stop_signal()) + "; services stopped");
  return kExitInterrupted;
}

// The end of a chat session: services stopped, the turns written to --out, the exit code
// (0 after /quit, end of input or Ctrl-C at the prompt; 5 after SIGTERM/SIGHUP; a service's failure).
int Runner::FinishChat(const ChatResult& chat) {
  const char* why = chat.end == ChatEnd::kTerminated ? "stop signal" : "chat ended";
  Stop(failure_ ? failure_->msg : why);
  const std::optional<Failure> fail = FinalFailure();
  if (!opt_.out.empty()) {
    try {
      WriteReportFile(opt_.out, ChatReport(chat));
    } catch (const Error&) {
      if (!fail) throw;  // the service's failure is what gets reported
    }
  }
  if (fail) throw Error(static_cast<ExitCode>(fail->code), fail->msg);
  if (chat.end == ChatEnd::kTerminated) {
    progress_.Always(std::string("k3-launch: interrupted by ") + SignalName(sup_.stop_signal()) + "; services stopped");
    return kExitInterrupted;
  }
  return kExitOk;
}

}  // namespace

std::string PromptTooLong(int64_t prompt_tokens, int64_t context) {
  return "the prompt has " + std::to_string(prompt_tokens) + " tokens but the context is " + std::to_string(context) +
         " (--context): it does not fit";
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

int RunPipeline(const LaunchOptions& opt, const ModelLayout& m, const plan::MemoryPlan& p,
                const PromptInput& prompt) {
  Runner r(opt, m, p, prompt);
  return r.Run();
}

}  // namespace k3::launch
