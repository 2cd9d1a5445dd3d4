#include "launcher/chat.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <functional>
#include <map>

#include "common/chat_control_ids.h"
#include "common/error.h"
#include "common/ipc/tokenizer_client.h"
#include "common/ipc/zmq_channel.h"
#include "launcher/chat_saved.h"
#include "launcher/input_history.h"
#include "launcher/chat_turn.h"

namespace k3::launch {
namespace tk = ipc::tokenizer;
namespace cp = ipc::compute;
using Clock = std::chrono::steady_clock;

namespace {

const char* FinishName(cp::StopReason r) {
  switch (r) {
    case cp::StopReason::kStopId: return "stop";
    case cp::StopReason::kLength: return "length";
    case cp::StopReason::kCancelled: return "cancelled";
    case cp::StopReason::kInterrupted: return "interrupted";
  }
  return "length";
}

const char* EndName(ChatEnd e) {
  switch (e) {
    case ChatEnd::kQuit: return "quit";
    case ChatEnd::kEndOfInput: return "end_of_input";
    case ChatEnd::kInterrupt: return "interrupt";
    case ChatEnd::kTerminated: return "signal";
    case ChatEnd::kFailed: return "failed";
  }
  return "quit";
}

class Session {
 public:
  Session(ChatHost& host, const LaunchOptions& opt, int32_t vocab)
      : host_(host), opt_(opt), vocab_(vocab), tok_(host.Context(), zmq::socket_type::dealer),
        tty_(::isatty(STDIN_FILENO) == 1 && ::isatty(STDOUT_FILENO) == 1),
        settings_{opt.sampling, !opt.no_think, opt.thinking_effort},
        input_(tty_, InputHistoryFile(opt.input_history, std::getenv("XDG_STATE_HOME"), std::getenv("HOME")),
               [this] { return WaitForLine(); }, [this](const std::string& s) { host_.Note(s); }),
        view_(tty_, [this](const std::string& s) { host_.Out(s); }) {
    tok_.set(zmq::sockopt::linger, 0);
    ipc::Connect(tok_, host.TokenizerEndpoint());
    if (!opt_.system.empty()) history_.push_back({"system", opt_.system, std::nullopt});
  }
  ChatResult Run();

 private:
  struct Pending {  // a one-shot Decode of one generated id, in order
    uint64_t id;
    ChannelSplitter::Channel channel;
  };

  bool Stopping() { return host_.Failed() || host_.Terminated(); }
  void PumpOnce(std::chrono::milliseconds wait, bool with_stdin, bool* stdin_ready = nullptr);
  void DrainTokenizer();
  std::optional<tk::Message> CallTokenizer(const std::function<ipc::Encoded(uint64_t)>& make);
  void ResetConversation();
  std::vector<int32_t> Encode(const std::string& text, bool allow_special);
  void LookUpControlIds();
  Wake WaitForLine();
  void Turn(const std::string& text);
  void Command(const std::string& line);
  std::optional<cp::StateDone> StateCall(cp::StateAction action, const std::string& path, const std::string& extra);

  ChatHost& host_;
  const LaunchOptions& opt_;
  const int32_t vocab_;
  zmq::socket_t tok_;
  ipc::TokenizerRequests tok_requests_{tok_};
  ipc::RejectCounter rejects_;
  std::map<uint64_t, tk::Message> tok_replies_;  // answers not taken yet, by request id
  uint64_t next_request_ = 1;
  const bool tty_;
  ChatSettings settings_;  // sampling and thinking: what /set changes
  ChatInput input_;
  ReplyView view_;
  ChatControlIds ids_;
  std::vector<ChatMessage> history_;
  KeptConversation kept_;             // what compute's state holds of the conversation
  std::vector<ChatTurn> turns_;
  bool quit_ = false;
};

void Session::PumpOnce(std::chrono::milliseconds wait, bool with_stdin, bool* stdin_ready) {
  zmq::pollitem_t items[] = {{tok_.handle(), 0, ZMQ_POLLIN, 0}, {nullptr, STDIN_FILENO, ZMQ_POLLIN, 0}};
  host_.Pump(std::span<zmq::pollitem_t>(items, with_stdin ? 2 : 1), wait);
  if (stdin_ready) *stdin_ready = with_stdin && (items[1].revents & (ZMQ_POLLIN | ZMQ_POLLERR)) != 0;
  DrainTokenizer();
}

void Session::DrainTokenizer() {
  while (auto r = ipc::ReceiveVerified(tok_, false, ipc::DecodeTokenizer, ipc::Clock::now(), rejects_)) {
    const uint64_t id = std::visit([](const auto& m) { return m.request_id; }, r->message);
    if (tok_requests_.Answered(id)) tok_replies_[id] = std::move(r->message);  // else a resend's second answer
  }
}

// Sends a request and pumps until its answer. A restarted tokenizer loses what was in flight,
// so the request goes again every 5 s (ipc::kTokenizerResend); nullopt after 60 s or when the
// session stops.
std::optional<tk::Message> Session::CallTokenizer(const std::function<ipc::Encoded(uint64_t)>& make) {
  const auto give_up = Clock::now() + std::chrono::seconds(60);
  const uint64_t id = tok_requests_.Send(make, ipc::TokenizerRequests::Resend::kOnRestartOrTimeout);
  while (Clock::now() < give_up && !Stopping()) {
    PumpOnce(std::chrono::milliseconds(20), false);
    auto it = tok_replies_.find(id);
    if (it != tok_replies_.end()) {
      tk::Message m = std::move(it->second);
      tok_replies_.erase(it);
      return m;
    }
    tok_requests_.ResendStale(Clock::now());
  }
  tok_requests_.Forget(id);
  return std::nullopt;
}

std::vector<int32_t> Session::Encode(const std::string& text, bool allow_special) {
  auto r = CallTokenizer([&](uint64_t id) { return ipc::Encode(tk::Encode{id, text, allow_special}); });
  if (!r) throw RuntimeFailure("the tokenizer did not answer");
  if (const auto* f = std::get_if<tk::Failed>(&*r)) throw BadInput("tokenizer: " + f->detail);
  return std::get<tk::EncodedIds>(*r).ids;
}

void Session::LookUpControlIds() {
  std::map<std::string, std::vector<int32_t>> answers;
  for (const ControlIdQuery& q : ControlIdQueries()) answers[q.text] = Encode(q.text, q.special);
  auto ids = ControlIdsFrom(answers, vocab_);
  if (const auto* p = std::get_if<ControlIdProblem>(&ids)) {
    if (p->out_of_vocab)
      throw BadInput("--chat: tokenizer id " + std::to_string(p->id) + " is outside the model's vocabulary");
    throw BadInput("--chat: the tokenizer has no special token " + p->token + " (not a K3 chat vocabulary)");
  }
  ids_ = std::get<ChatControlIds>(ids);
}

// Compute holds nothing of the conversation any more: it starts afresh (system message kept).
void Session::ResetConversation() {
  history_.clear();
  if (!opt_.system.empty()) history_.push_back({"system", opt_.system, std::nullopt});
  kept_ = {};
}

// The pipeline runs while the user types; Ctrl-C at the prompt ends the session.
Wake Session::WaitForLine() {
  if (Stopping()) return Wake::kStop;
  if (host_.TakeInterrupt()) return Wake::kInterrupt;
  bool ready = false;
  PumpOnce(std::chrono::milliseconds(200), true, &ready);
  return ready ? Wake::kReady : Wake::kIdle;
}

void Session::Turn(const std::string& text) {
  const auto entered = Clock::now();  // a turn's times start here: what the user waits
  history_.push_back({"user", text, std::nullopt});
  auto rendered_msg = CallTokenizer([&](uint64_t id) {
    // The terminal chat declares no tools.
    return ipc::Encode(tk::RenderChat{id, HistoryJsonl(history_), settings_.thinking, settings_.effort, "",
                                      tk::ToolChoice::kAuto, false, ""});
  });
  if (!rendered_msg || std::holds_alternative<tk::Failed>(*rendered_msg)) {
    history_.pop_back();
    if (rendered_msg) host_.Note("[chat] cannot render the conversation: " + std::get<tk::Failed>(*rendered_msg).detail);
    else if (!Stopping()) host_.Note("[chat] the tokenizer did not answer");
    return;
  }
  const std::vector<int32_t> rendered = std::get<tk::EncodedIds>(*rendered_msg).ids;
  const TurnPlan plan = PlanTurn(rendered, kept_, ids_.eom, opt_.context);
  const std::vector<int32_t>& send = plan.send;
  const int64_t reused = plan.reused;
  if (plan.room < 1) {
    history_.pop_back();
    host_.Note("[chat] the context is full: " + std::to_string(reused + static_cast<int64_t>(send.size())) +
               " tokens of " + std::to_string(opt_.context) + "; /reset to start over");
    return;
  }
  const cp::Generate g = TurnGenerate(opt_, plan, ids_, next_request_++, settings_.sampling);
  host_.ComputeInbox().clear();
  host_.SendCompute(ipc::Encode(g));

  ChannelSplitter split(ids_, settings_.thinking);
  std::vector<int32_t> generated;
  std::optional<Clock::time_point> first_token;  // its arrival here
  Clock::time_point done_at;
  std::deque<Pending> pending;
  std::string bytes[3], shown_bytes[3];  // per channel: decoded, printed
  std::optional<cp::Done> done;
  bool cancel_sent = false;
  view_.Begin();
  auto flush = [&](bool final) {
    while (!pending.empty()) {
      auto it = tok_replies_.find(pending.front().id);
      if (it == tok_replies_.end()) {
        if (!final) break;  // in order; at the end an unanswered decode (lost in a restart) is skipped
        tok_requests_.Forget(pending.front().id);
        pending.pop_front();
        continue;
      }
      const auto ch = static_cast<size_t>(pending.front().channel);
      if (const auto* d = std::get_if<tk::Decoded>(&it->second)) bytes[ch] += d->text;
      tok_replies_.erase(it);
      pending.pop_front();
    }
    for (size_t ch : {1u, 2u}) {
      const size_t upto = final ? bytes[ch].size() : CompleteUtf8Prefix(bytes[ch]);
      if (upto > shown_bytes[ch].size()) {
        view_.Show(static_cast<ChannelSplitter::Channel>(ch), bytes[ch].substr(shown_bytes[ch].size(), upto - shown_bytes[ch].size()));
        shown_bytes[ch] = bytes[ch].substr(0, upto);
      }
    }
  };
  while (!done && !Stopping()) {
    PumpOnce(std::chrono::milliseconds(20), false);
    if (host_.TakeInterrupt() && !cancel_sent) {
      host_.SendCompute(ipc::Encode(cp::Cancel{g.request_id}));
      cancel_sent = true;
    }
    auto& inbox = host_.ComputeInbox();
    while (!inbox.empty() && !done) {
      cp::Message m = std::move(inbox.front());
      inbox.pop_front();
      if (const auto* t = std::get_if<cp::Token>(&m)) {
        if (t->request_id != g.request_id || t->index != static_cast<int32_t>(generated.size())) continue;
        if (generated.empty()) first_token = Clock::now();
        generated.push_back(t->id);
        const auto ch = split.Push(t->id);
        // The terminal chat declares no tools: a tools channel is not shown, as other framing.
        if (ch == ChannelSplitter::Channel::kNone || ch == ChannelSplitter::Channel::kTools) continue;
        // Not sent again: a decode lost in a restart is skipped at the end (docs/chat.md).
        const int32_t token = t->id;
        const uint64_t id = tok_requests_.Send(
            [&](uint64_t rid) { return ipc::Encode(tk::Decode{rid, {token}, false, false}); },
            ipc::TokenizerRequests::Resend::kNever);
        pending.push_back({id, ch});
      } else if (const auto* d = std::get_if<cp::Done>(&m)) {
        if (d->request_id == g.request_id) {
          done = *d;
          done_at = Clock::now();
        }
      }
    }
    flush(false);
  }
  const auto give_up = Clock::now() + std::chrono::seconds(30);
  while (!pending.empty() && !Stopping() && Clock::now() < give_up) {
    PumpOnce(std::chrono::milliseconds(20), false);
    flush(false);
  }
  flush(true);
  view_.EndLine();
  if (!done) return;  // the session is stopping

  ChatTurn t;
  t.prompt_tokens = static_cast<int64_t>(send.size());
  t.reused_tokens = reused + done->stats.cached_tokens;  // kept, or from a prefix snapshot (store)
  t.generated_tokens = static_cast<int64_t>(generated.size());
  t.reasoning = settings_.thinking ? bytes[1] : "";
  t.response = bytes[2];
  t.finish_reason = FinishName(done->reason);
  t.seconds = std::chrono::duration<double>(done_at - entered).count();
  if (first_token) t.first_token_seconds = std::chrono::duration<double>(*first_token - entered).count();
  turns_.push_back(t);
  history_.push_back({"assistant", t.response, settings_.thinking ? std::optional<std::string>(t.reasoning) : std::nullopt});
  // The next turn extends the state by the ids fed (a reply cut short closed by the template's
  // ids), whatever the reply's text would tokenize to again.
  kept_ = AfterTurn(plan, rendered, generated, done->stats.position, ids_, settings_.thinking);
  host_.Note(TurnSummary(t, opt_.reply_limit));
}

std::optional<cp::StateDone> Session::StateCall(cp::StateAction action, const std::string& path, const std::string& extra) {
  cp::StateOp op;
  op.request_id = next_request_++;
  op.action = action;
  op.path = path;
  op.extra = extra;
  host_.ComputeInbox().clear();
  host_.SendCompute(ipc::Encode(op));
  while (!Stopping()) {
    PumpOnce(std::chrono::milliseconds(20), false);
    auto& inbox = host_.ComputeInbox();
    while (!inbox.empty()) {
      cp::Message m = std::move(inbox.front());
      inbox.pop_front();
      if (const auto* d = std::get_if<cp::StateDone>(&m))
        if (d->request_id == op.request_id) return *d;
    }
  }
  return std::nullopt;
}

void Session::Command(const std::string& line) {
  const auto [cmd, arg] = ParseChatCommand(line);
  if (cmd == "/quit" || cmd == "/exit") {
    quit_ = true;
  } else if (cmd == "/help") {
    host_.Out(ChatHelp(true));
  } else if (cmd == "/set") {
    if (arg.empty()) return host_.Out(SettingsText(settings_) + "\n");
    if (const std::string bad = ApplySet(settings_, arg); !bad.empty()) return host_.Note("[chat] " + bad);
    host_.Out("(" + SettingsText(settings_) + ")\n");
  } else if (cmd == "/reset") {
    auto d = StateCall(cp::StateAction::kReset, "", "");
    if (!d) return;
    ResetConversation();
    host_.Out("(conversation cleared)\n");
  } else if (cmd == "/save") {
    if (arg.empty()) return host_.Note("[chat] /save needs a path");
    if (kept_.ids == 0) return host_.Note("[chat] nothing to save yet");
    const SavedChat saved{history_, settings_.thinking, settings_.effort, kept_.last_render, kept_.valid, kept_.closing};
    auto d = StateCall(cp::StateAction::kSave, arg, SavedChatExtra(saved));
    if (!d) return;
    if (!d->ok) return host_.Note("[chat] /save " + arg + ": " + d->error);
    host_.Out("(saved " + std::to_string(d->position) + " tokens to " + arg + ")\n");
  } else if (cmd == "/load") {
    if (arg.empty()) return host_.Note("[chat] /load needs a path");
    auto d = StateCall(cp::StateAction::kLoad, arg, "");
    if (!d) return;
    if (!d->ok) return host_.Note("[chat] /load " + arg + ": " + d->error);
    try {
      SavedChat saved = ParseSavedChat(d->extra);
      if (saved.thinking != settings_.thinking || (saved.thinking && saved.effort != settings_.effort))
        host_.Note(std::string("[chat] continuing with the saved conversation's thinking ") +
                   (saved.thinking ? "on, effort " + saved.effort : "off"));
      history_ = std::move(saved.history);
      settings_.thinking = saved.thinking;
      settings_.effort = saved.effort;
      kept_ = {std::move(saved.last_render), std::move(saved.closing), d->position, saved.state_valid};
    } catch (const std::exception& e) {
      StateCall(cp::StateAction::kReset, "", "");  // compute holds a state without its history
      ResetConversation();
      return host_.Note("[chat] /load " + arg + ": " + e.what() + "; the conversation starts afresh");
    }
    size_t turns = 0;
    for (const ChatMessage& m : history_) turns += m.role == "assistant";
    host_.Out("(loaded " + std::to_string(turns) + " turns, " + std::to_string(kept_.ids) + " tokens from " + arg + ")\n");
  } else {
    host_.Note("[chat] unknown command " + cmd + " (/help lists them)");
  }
}

ChatResult Session::Run() {
  LookUpControlIds();
  host_.Note(std::string("[chat] ready (thinking ") + (settings_.thinking ? "on, effort " + settings_.effort : "off") +
             "); /help for commands, /quit or Ctrl-D to end");
  ChatResult r;
  for (;;) {
    std::string line;
    const Input in = input_.Read(&line);
    if (in == Input::kLine && tty_) host_.InputLineEnded();
    if (in == Input::kEof) r.end = ChatEnd::kEndOfInput;
    else if (in == Input::kInterrupt) r.end = ChatEnd::kInterrupt;
    if (in != Input::kLine) break;
    if (line.empty()) continue;
    if (line[0] == '/') Command(line);
    else Turn(line);
    if (quit_ || Stopping()) break;
  }
  if (host_.Failed()) r.end = ChatEnd::kFailed;
  else if (host_.Terminated()) r.end = ChatEnd::kTerminated;
  r.turns = std::move(turns_);
  return r;
}

}  // namespace

ChatResult RunChat(ChatHost& host, const LaunchOptions& opt, int32_t vocab) {
  Session s(host, opt, vocab);
  return s.Run();
}

nlohmann::json ChatReport(const ChatResult& r) {
  // Model text may hold ill-formed UTF-8 (single-byte tokens): U+FFFD in the report.
  auto text = [](const std::string& s) {
    return nlohmann::json::parse(nlohmann::json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  };
  nlohmann::json turns = nlohmann::json::array();
  for (const ChatTurn& t : r.turns)
    turns.push_back({{"prompt_tokens", t.prompt_tokens}, {"reused_tokens", t.reused_tokens},
                     {"generated_tokens", t.generated_tokens}, {"reasoning", text(t.reasoning)}, {"response", text(t.response)},
                     {"finish_reason", t.finish_reason}, {"seconds", t.seconds},
                     {"first_token_seconds", t.first_token_seconds ? nlohmann::json(*t.first_token_seconds) : nlohmann::json()}});
  return {{"mode", "chat"}, {"end", EndName(r.end)}, {"turns", std::move(turns)}};
}

}  // namespace k3::launch
