// K3's chat format as both the terminal chat (launcher/chat.h) and k3-server read it: the
// control ids of the XTML template, the reasoning/response channels of generated ids, the
// JSONL history RenderChat takes, and UTF-8 hold-back for text shown piece by piece.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace k3 {

// The ids of the template's control tokens and tag names, asked from the tokenizer service.
struct ChatControlIds {
  int32_t open = -1, close = -1, sep = -1, eom = -1, eos = -1;
  std::vector<int32_t> think, response, message, tools;  // the ids of these tag names
  std::vector<int32_t> call, json;  // a forced call's closing tags (k3-server)
};

// Splits generated ids into the reasoning, response and tools channels as they arrive:
// <|open|>NAME<|sep|> opens a channel, <|close|>NAME<|sep|> closes it, <|end_of_msg|> or
// [EOS] ends the message. Payload outside the channels belongs to none. The tools channel
// holds elements of its own (call, argument): every id from its opening <|sep|> to its
// closing <|close|>tools<|sep|> (the closing tag included) is kTools.
class ChannelSplitter {
 public:
  enum class Channel { kNone, kThink, kResponse, kTools };
  ChannelSplitter(const ChatControlIds& ids, bool thinking);
  // The channel whose text the id is part of (kNone for control ids and tag names).
  Channel Push(int32_t id);
  bool ended() const { return ended_; }

 private:
  const ChatControlIds& ids_;
  Channel channel_;
  bool in_tag_ = false, opening_ = false, ended_ = false;
  std::vector<int32_t> tag_;
};

// The bytes of `s` up to its last complete (or invalid, hence final) UTF-8 sequence: what
// can be printed now without splitting a character.
size_t CompleteUtf8Prefix(const std::string& s);

// Where the conversation before the newest message ends in `ids` (a rendering with the
// generation prompt): just after the next-to-last <|end_of_msg|>, the last one ending the new
// user message (text never encodes to that id). For a first message that is the preamble
// (system and thinking-effort messages), the same for every conversation with these settings;
// 0 when there is no earlier message. The chat and k3-server ask compute for a prefix snapshot
// there (Generate.snapshot_at).
int64_t BeforeNewestMessage(const std::vector<int32_t>& ids, int32_t eom);

// The JSONL history the tokenizer's RenderChat reads (docs/tokenizer.md, "History").
struct ChatToolCall {
  std::string id, name, arguments;  // arguments: the JSON text as the client sent it
};
struct ChatMessage {
  std::string role, content;
  std::optional<std::string> reasoning;
  std::vector<ChatToolCall> tool_calls = {};               // assistant
  std::optional<std::string> tool_call_id = std::nullopt;  // tool
};
std::string HistoryJsonl(const std::vector<ChatMessage>& messages);

}  // namespace k3
