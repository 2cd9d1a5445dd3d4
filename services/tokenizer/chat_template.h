// The XTML chat format (docs/tokenizer.md, "Chat template"). Control segments (tags written
// by this code) are encoded with added tokens allowed; every text segment (message content,
// reasoning, the thinking-effort preamble) is encoded with them disallowed, so user text can
// never produce a control id.
//
//   message  = <|open|>message role="R"<|sep|> BODY <|close|>message<|sep|><|end_of_msg|>
//   assistant BODY, thinking on:
//              <|open|>think<|sep|> reasoning <|close|>think<|sep|>
//              <|open|>response<|sep|> content <|close|>response<|sep|>
//   assistant BODY, thinking off: only the response channel
//   preamble (thinking on, first): <|open|>message role="system" type="thinking-effort"<|sep|>
//              TEXT(effort) <|close|>message<|sep|><|end_of_msg|>
//   generation prompt: <|open|>message role="assistant"<|sep|><|open|>think<|sep|>
//              (thinking off: ...<|open|>response<|sep|>)
//   tools (tool_template.h): the declaration first of all, an assistant's calls after its
//              response channel, tool results as role="tool" messages, the tool-choice message
//              before the generation prompt
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "chat_types.h"
#include "tool_template.h"
#include "tokenizer.h"

namespace k3::tok {

struct ChatOptions {
  bool thinking = true;
  std::string thinking_effort = "max";  // low | high | max
  std::string tools_json = {};           // the request's `tools` (a JSON array); empty: none declared
  ToolChoice tool_choice = ToolChoice::kAuto;
  // The last message is an assistant message the model continues (a prefill): it is rendered
  // open, its response channel (or, with tool calls, its tools channel) not closed; then no
  // generation prompt and no tool-choice message.
  bool continue_final = false;
  // A forced call of this function (k3-server's tool_choice `required` or named, docs/server.md
  // "Tool calls"): the generation prompt (thinking off) goes on into the tools channel with the
  // call's arguments open as a json segment, which the constrained value fills; "" none.
  std::string forced_call = {};
};

// Exact text of the thinking-effort preamble for effort E.
std::string ThinkingEffortText(const std::string& effort);
bool IsValidThinkingEffort(const std::string& effort);

struct Completion {
  std::optional<std::string> reasoning_content;  // nullopt when thinking is off
  std::string content;
  uint32_t end_id;  // <|end_of_msg|> or [EOS]
};

class ChatTemplate {
 public:
  // Looks up <|open|>, <|close|>, <|sep|>, <|end_of_msg|> and [EOS] by content; throws
  // kExitBadInput if the vocabulary lacks one. `tok` must outlive the template.
  explicit ChatTemplate(const Tokenizer& tok);

  // Renders the transcript, then the generation prompt if `add_generation_prompt`.
  // The transcript must be valid (ValidateConversation); throws kExitBadInput otherwise.
  std::vector<uint32_t> Render(const std::vector<ChatMessage>& messages, const ChatOptions& opt,
                               bool add_generation_prompt = true) const;

  // Parses generated ids (which start right after the generation prompt) back into an
  // assistant message. Strict: the channel framing must be exactly as rendered, no added
  // token may appear inside a payload, payloads must be UTF-8, and exactly one end id must
  // close the message. Throws kExitBadInput with the position on any deviation.
  Completion ParseCompletion(const std::vector<uint32_t>& ids, bool thinking) const;

  uint32_t open_id() const { return open_; }
  uint32_t close_id() const { return close_; }
  uint32_t sep_id() const { return sep_; }
  uint32_t eom_id() const { return eom_; }
  uint32_t eos_id() const { return eos_; }

 private:
  void Control(std::string_view s, std::vector<uint32_t>* out) const;
  void Append(const Segments& segments, std::vector<uint32_t>* out) const;
  void Text(std::string_view s, std::vector<uint32_t>* out) const;
  std::vector<uint32_t> Ids(std::string_view control) const;

  const Tokenizer& tok_;
  uint32_t open_, close_, sep_, eom_, eos_;
};

}  // namespace k3::tok
