// k3-launch --chat: a terminal REPL over the running pipeline (docs/chat.md). The services
// stay up for the session; each turn renders the conversation through the tokenizer service
// (RenderChat, K3's XTML template), sends compute only the ids after what its kept state
// already holds (Generate.keep_state; after a reply cut short, first the ids that close it),
// and streams the reply, reasoning apart from the answer.
// Commands: /reset, /save PATH, /load PATH, /set, /quit (and /help). Ctrl-C during a reply sends
// Cancel{request_id}; at the prompt it ends the session like /quit, as does end of input.
// Input: chat_input.h (libedit on a terminal); the reply's drawing: reply_view.h.
#pragma once
#include <zmq.hpp>

#include <chrono>
#include <cstdint>
#include <deque>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/ipc/messages.h"
#include "common/ipc/protocol.h"
#include "common/chat_format.h"
#include "launcher/chat_input.h"
#include "launcher/chat_settings.h"
#include "launcher/chat_turn.h"
#include "launcher/reply_view.h"
#include "options.h"

namespace k3::launch {

// The template pieces the REPL shares with k3-server (common/chat_format.h).
using k3::ChannelSplitter;
using k3::ChatControlIds;
using k3::ChatMessage;
using k3::CompleteUtf8Prefix;
using k3::HistoryJsonl;

// What the REPL needs from the running pipeline (run.cpp's Runner).
class ChatHost {
 public:
  virtual ~ChatHost() = default;
  // One round of the pipeline's loop (its sockets, the services' deaths and stderr) that also
  // polls `extra` (their revents are set), waiting at most `wait`.
  virtual void Pump(std::span<zmq::pollitem_t> extra, std::chrono::milliseconds wait) = 0;
  virtual bool Failed() const = 0;     // a service failed: the session ends, the run reports it
  // SIGINT since the last call (consumed); a SIGTERM/SIGHUP is not consumed: Terminated().
  virtual bool TakeInterrupt() = 0;
  virtual bool Terminated() const = 0;
  virtual void SendCompute(const ipc::Encoded& m) = 0;
  virtual std::deque<ipc::compute::Message>& ComputeInbox() = 0;  // Token, Done, StateDone
  virtual void Out(const std::string& s) = 0;   // stdout (the conversation)
  virtual void Note(const std::string& s) = 0;  // one stderr line
  // The user ended a line on the terminal: the cursor is at the start of a row again.
  virtual void InputLineEnded() = 0;
  virtual zmq::context_t& Context() = 0;
  virtual std::string TokenizerEndpoint() const = 0;
};

// How a session ended.
enum class ChatEnd { kQuit, kEndOfInput, kInterrupt, kTerminated, kFailed };

struct ChatResult {
  ChatEnd end = ChatEnd::kQuit;
  std::vector<ChatTurn> turns;
};

// Runs the REPL on stdin/stdout until /quit, end of input, Ctrl-C at the prompt, a stop signal
// or a service failure.
ChatResult RunChat(ChatHost& host, const LaunchOptions& opt, int32_t vocab);

// The --out JSON of a chat session: {"mode": "chat", "end", "turns": [...]}.
nlohmann::json ChatReport(const ChatResult& r);

}  // namespace k3::launch
