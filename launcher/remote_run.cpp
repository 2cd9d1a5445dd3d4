#include "launcher/remote_run.h"

#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>

#include "common/id_list.h"
#include "common/sampling_check.h"
#include "common/stdout_writer.h"
#include "common/user_file.h"
#include "launcher/chat.h"
#include "launcher/chat_input.h"
#include "launcher/chat_settings.h"
#include "launcher/chat_turn.h"
#include "launcher/input_history.h"
#include "launcher/remote_client.h"
#include "launcher/reply_view.h"
#include "launcher/report.h"
#include "launcher/supervisor.h"

namespace k3::launch {
namespace {

using Clock = std::chrono::steady_clock;
using Channel = ChannelSplitter::Channel;

double Since(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

void Note(const std::string& s) {
  const std::string line = s + "\n";
  std::fputs(line.c_str(), stderr);
  std::fflush(stderr);
}

// One streamed request as the terminal sees it: its pieces, times and end.
struct Reply {
  std::string reasoning, content, finish_reason;
  std::vector<int32_t> ids;
  int64_t prompt_tokens = 0, completion_tokens = 0, cached_tokens = 0;
  std::optional<double> first_token_seconds;
  double seconds = 0;
  bool cancelled = false;       // Ctrl-C (or a stop signal) closed the stream
  std::optional<Error> failure;
  int status = 0;               // the HTTP status (0: none)
};

class Connected {
 public:
  Connected(const LaunchOptions& opt, RemoteServer& server) : opt_(opt), server_(server) {}

  // Streams `body` to `path`; `show` gets each piece's text by channel as it arrives.
  Reply Stream(const std::string& path, const nlohmann::json& body,
               const std::function<void(Channel, const std::string&)>& show) {
    Reply r;
    std::string last_event;  // named when the stream ends early
    const auto start = Clock::now();
    auto st = server_.Post(path, body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
    for (;;) {
      pollfd fds[] = {{st->wake_fd(), POLLIN, 0}, {sup_.wake_fd(), POLLIN, 0}};
      ::poll(fds, 2, 200);
      sup_.DrainWake();
      if (!r.cancelled && (sup_.TakeSigint() || Terminated())) {
        st->Cancel();
        r.cancelled = true;
      }
      // Read before Take: the thread sets it after its last events, so none is left behind.
      const bool finished = st->finished();
      for (const std::string& data : st->Take()) {
        if (r.cancelled) break;
        last_event = data;
        StreamPiece p;
        try {
          p = ParseStreamData(data);
        } catch (const Error& e) {
          r.failure = e;
          st->Cancel();
          break;
        }
        if (!r.first_token_seconds && (!p.reasoning.empty() || !p.content.empty()))
          r.first_token_seconds = Since(start, Clock::now());
        r.reasoning += p.reasoning;
        r.content += p.content;
        if (!p.reasoning.empty()) show(Channel::kThink, p.reasoning);
        if (!p.content.empty()) show(Channel::kResponse, p.content);
        if (!p.finish_reason.empty()) r.finish_reason = p.finish_reason;
        if (!p.token_ids.empty()) r.ids = p.token_ids;
        if (p.prompt_tokens) r.prompt_tokens = *p.prompt_tokens;
        if (p.completion_tokens) r.completion_tokens = *p.completion_tokens;
        if (p.cached_tokens) r.cached_tokens = *p.cached_tokens;
      }
      if (finished) break;
    }
    r.seconds = Since(start, Clock::now());
    if (!r.failure) r.failure = st->failure();
    r.status = st->status();
    if (r.cancelled) {
      r.finish_reason = "cancelled";
      r.failure.reset();
    } else if (!r.failure && r.finish_reason.empty()) {
      r.failure = RuntimeFailure(server_.url() + ": the reply ended without a finish_reason (" +
                                 (last_event.empty() ? std::string("no event") : "last event: " + last_event.substr(0, 200)) + ")");
    }
    if (r.completion_tokens == 0) r.completion_tokens = static_cast<int64_t>(r.ids.size());
    return r;
  }

  bool Terminated() const { return sup_.stop_signal() == SIGTERM || sup_.stop_signal() == SIGHUP; }

  // The chat's wait for a line: stdin or a signal.
  Wake WaitForLine() {
    if (Terminated()) return Wake::kStop;
    if (sup_.TakeSigint()) return Wake::kInterrupt;
    pollfd fds[] = {{STDIN_FILENO, POLLIN, 0}, {sup_.wake_fd(), POLLIN, 0}};
    ::poll(fds, 2, 200);
    sup_.DrainWake();
    if (Terminated()) return Wake::kStop;
    if (sup_.TakeSigint()) return Wake::kInterrupt;
    return (fds[0].revents & (POLLIN | POLLHUP | POLLERR)) ? Wake::kReady : Wake::kIdle;
  }

  int Chat(const std::string& model);
  int Prompt(const std::string& model);

 private:
  void Out(const std::string& s) { WriteStdoutOrStop(s); }
  const LaunchOptions& opt_;
  RemoteServer& server_;
  Supervisor sup_;  // no children: its SIGINT/SIGTERM/SIGHUP flag and wake pipe
};

ChatTurn TurnOf(const Reply& r) {
  ChatTurn t;
  t.reused_tokens = r.cached_tokens;
  t.prompt_tokens = r.prompt_tokens - r.cached_tokens;
  t.generated_tokens = r.completion_tokens;
  t.reasoning = r.reasoning;
  t.response = r.content;
  t.finish_reason = r.finish_reason;
  t.seconds = r.seconds;
  t.first_token_seconds = r.first_token_seconds;
  return t;
}

int Connected::Chat(const std::string& model) {
  const bool tty = ::isatty(STDIN_FILENO) == 1 && ::isatty(STDOUT_FILENO) == 1;
  ChatSettings settings{opt_.sampling, !opt_.no_think, opt_.thinking_effort};
  ChatInput input(tty, InputHistoryFile(opt_.input_history, std::getenv("XDG_STATE_HOME"), std::getenv("HOME")),
                  [this] { return WaitForLine(); }, Note);
  ReplyView view(tty, [this](const std::string& s) { Out(s); });
  std::vector<ChatMessage> history;
  auto reset = [&] {
    history.clear();
    if (!opt_.system.empty()) history.push_back({"system", opt_.system, std::nullopt});
  };
  reset();
  std::vector<ChatTurn> turns;
  Note("[chat] connected to " + server_.url() + " (model " + model + ", thinking " +
       (settings.thinking ? "on, effort " + settings.effort : "off") + "); /help for commands, /quit or Ctrl-D to end");
  ChatEnd end = ChatEnd::kQuit;
  for (;;) {
    std::string line;
    const Input in = input.Read(&line);
    if (in == Input::kEof) end = ChatEnd::kEndOfInput;
    else if (in == Input::kInterrupt) end = ChatEnd::kInterrupt;
    else if (in == Input::kStop) end = ChatEnd::kTerminated;
    if (in != Input::kLine) break;
    if (line.empty()) continue;
    if (line[0] == '/') {
      const ChatCommand c = ParseChatCommand(line);
      if (c.cmd == "/quit" || c.cmd == "/exit") break;
      if (c.cmd == "/help") Out(ChatHelp(false));
      else if (c.cmd == "/reset") {
        reset();
        Out("(conversation cleared)\n");
      } else if (c.cmd == "/set") {
        if (c.arg.empty()) Out(SettingsText(settings) + "\n");
        else if (const std::string bad = ApplySet(settings, c.arg); !bad.empty()) Note("[chat] " + bad);
        else Out("(" + SettingsText(settings) + ")\n");
      } else if (c.cmd == "/save" || c.cmd == "/load") {
        Note("[chat] " + c.cmd + " acts on compute's state: only in a local chat, not with --connect");
      } else {
        Note("[chat] unknown command " + c.cmd + " (/help lists them)");
      }
      continue;
    }
    history.push_back({"user", line, std::nullopt});
    view.Begin();
    Reply r = Stream("/v1/chat/completions",
                     ChatRequest(model, history, settings, opt_.reply_limit, opt_.stop, opt_.ignore_eos),
                     [&](Channel ch, const std::string& s) { view.Show(ch, s); });
    view.EndLine();
    if (r.failure) {
      history.pop_back();
      // The server gone, the key refused or a URL that is not the API ends the session; a
      // request refused (400: a /set value the server does not take), a busy or failing server is
      // one line, and the chat goes on (the message can be sent again).
      if (r.status == 0 || r.status == 401 || r.status == 403 || r.status == 404) throw *r.failure;
      Note(std::string("[chat] ") + r.failure->what());
      continue;
    }
    history.push_back({"assistant", r.content, settings.thinking ? std::optional<std::string>(r.reasoning) : std::nullopt});
    turns.push_back(TurnOf(r));
    if (r.cancelled) {  // the server's usage comes only with a reply that finished
      char first[48] = ", no token", stopped[160];
      if (r.first_token_seconds) std::snprintf(first, sizeof first, ", first token %.3f s", *r.first_token_seconds);
      std::snprintf(stopped, sizeof stopped, "[chat] stopped by Ctrl-C after %.2f s%s", r.seconds, first);
      Note(stopped);
    } else {
      Note(TurnSummary(turns.back(), opt_.reply_limit));
    }
    if (Terminated()) {
      end = ChatEnd::kTerminated;
      break;
    }
  }
  if (!opt_.out.empty()) {
    nlohmann::json rep = ChatReport({end, turns});
    rep["server"] = server_.url();
    WriteReportFile(opt_.out, rep);
  }
  return end == ChatEnd::kTerminated ? kExitInterrupted : kExitOk;
}

int Connected::Prompt(const std::string& model) {
  std::string text = opt_.prompt;
  std::vector<int32_t> ids;
  if (!opt_.prompt_file.empty()) text = ReadUserFile(opt_.prompt_file, kMaxPromptFileBytes, "--prompt-file", kExitBadInput);
  if (!opt_.ids.empty())
    for (int64_t id : ParseIdList(opt_.ids, "--ids", INT32_MAX)) ids.push_back(static_cast<int32_t>(id));
  if (text.empty() && ids.empty()) throw BadInput("the prompt is empty");
  const bool show_text = !text.empty();
  bool line_open = false;
  Reply r = Stream("/v1/completions",
                   CompletionRequest(model, text, ids, opt_.sampling, opt_.gen, opt_.stop, opt_.ignore_eos),
                   [&](Channel, const std::string& s) {
                     if (!show_text) return;
                     Out(s);
                     line_open = s.back() != '\n';
                   });
  if (line_open) Out("\n");
  if (r.failure) throw *r.failure;
  if (!show_text)
    for (int32_t id : r.ids) Out(std::to_string(id) + "\n");  // ids in, ids out, as a local run
  if (!opt_.quiet) Note(PromptSummary(TurnOf(r)));
  if (!opt_.out.empty()) {
    nlohmann::json rep = {{"mode", "connect"},
                          {"server", server_.url()},
                          {"model", model},
                          {"generated_ids", r.ids},
                          {"generated_text", nlohmann::json::parse(nlohmann::json(r.content).dump(
                                                 -1, ' ', false, nlohmann::json::error_handler_t::replace))},
                          {"finish_reason", r.finish_reason},
                          {"interrupted", r.cancelled},
                          {"usage", {{"prompt_tokens", r.prompt_tokens},
                                     {"completion_tokens", r.completion_tokens},
                                     {"cached_tokens", r.cached_tokens}}},
                          {"seconds", r.seconds},
                          {"first_token_seconds", r.first_token_seconds ? nlohmann::json(*r.first_token_seconds) : nlohmann::json()},
                          {"sampling", SamplingJson(opt_.sampling)}};
    WriteReportFile(opt_.out, rep);
  }
  if (r.cancelled) {
    Note("k3-launch: interrupted by " + std::string(sup_.stop_signal() == SIGTERM ? "SIGTERM" : sup_.stop_signal() == SIGHUP ? "SIGHUP" : "SIGINT") +
         "; the request was cancelled");
    return kExitInterrupted;
  }
  return kExitOk;
}

}  // namespace

int RunConnected(const LaunchOptions& given) {
  LaunchOptions opt = given;
  // k3-server takes seeds up to 2^63-1 (its JSON integers): a random one is drawn there.
  if (!opt.seed_given) opt.sampling.seed &= ~(uint64_t{1} << 63);
  if (!opt.out.empty()) CheckOutputPath(opt.out, "--out");
  RemoteServer server(opt.connect, opt.api_key);
  // The served model's name, and at once a check that the server is there and takes the key.
  const std::string model = ServedModel(server.Get("/v1/models"));
  Connected c(opt, server);
  return opt.chat ? c.Chat(model) : c.Prompt(model);
}

}  // namespace k3::launch
