// The chat history file: JSONL, one message per line,
//   {"role":"system|user|assistant|tool","content":"...","reasoning_content":"...",
//    "tool_calls":[{"id":"...","type":"function","function":{"name":"...","arguments":"..."}}],
//    "tool_call_id":"..."}
// reasoning_content and tool_calls are optional and only for assistant messages; tool messages
// need tool_call_id (naming a call of the assistant message before them). Each line goes through the
// strict JSON parser (common/json_strict.h: duplicate keys, trailing data, ill-formed UTF-8,
// unpaired surrogates, raw control bytes in strings are errors); then unknown keys, values of
// another type, \u0000, blank lines and lines over 16 MiB are refused too, each naming path:line.
// "\r\n" line ends are accepted (the \r is JSON whitespace). Written atomically (temp file,
// fsync, rename).
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "chat_types.h"

namespace k3::tok {

inline constexpr size_t kMaxHistoryLine = 16u << 20;

// Parses one line (without its '\n'); `where` prefixes errors ("path:line").
ChatMessage ParseHistoryLine(std::string_view line, const std::string& where);
// The line for `m`, without '\n'.
std::string FormatHistoryLine(const ChatMessage& m);

// System only first, then user/assistant alternating starting with user; after an assistant
// message with tool_calls, tool messages answering them (each call at most once), then
// assistant or user.
void ValidateConversation(const std::vector<ChatMessage>& msgs, const std::string& path);

// Reads and validates a history file. A missing file is an error unless missing_ok (then
// the history is empty).
std::vector<ChatMessage> ReadHistory(const std::string& path, bool missing_ok = false);
// Validates, then replaces `path` atomically; throws kExitRuntime on I/O failure.
void WriteHistory(const std::string& path, const std::vector<ChatMessage>& msgs);

}  // namespace k3::tok
