// The chat history file: JSONL, one message per line,
//   {"role":"system|user|assistant","content":"...","reasoning_content":"..."}
// reasoning_content is optional and only for assistant messages. Each line goes through the
// strict JSON parser (common/json_strict.h: duplicate keys, trailing data, ill-formed UTF-8,
// unpaired surrogates, raw control bytes in strings are errors); then unknown keys, non-string
// values, \u0000, blank lines and lines over 16 MiB are refused too, each naming path:line.
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

// System only first, then user/assistant alternating starting with user.
void ValidateConversation(const std::vector<ChatMessage>& msgs, const std::string& path);

// Reads and validates a history file. A missing file is an error unless missing_ok (then
// the history is empty).
std::vector<ChatMessage> ReadHistory(const std::string& path, bool missing_ok = false);
// Validates, then replaces `path` atomically; throws kExitRuntime on I/O failure.
void WriteHistory(const std::string& path, const std::vector<ChatMessage>& msgs);

}  // namespace k3::tok
