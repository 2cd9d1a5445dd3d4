// The line editor's history file (docs/chat.md "Input history"): the lines typed at the chat
// prompt, oldest first, one JSON string per line (so a pasted block with newlines is one
// entry), the newest kInputHistoryMax kept. It is separate from the conversation's JSONL
// history (docs/tokenizer.md "History"), which holds replies too and restarts with /reset;
// this one is what Up recalls, in any later session. Pure: parsing and formatting.
#pragma once
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

namespace k3::launch {

inline constexpr size_t kInputHistoryMax = 1000;

struct InputHistory {
  std::vector<std::string> entries;  // oldest first
  std::optional<size_t> bad_line;    // the first line (1-based) that is not a JSON string: the file is not ours
};

InputHistory ParseInputHistory(const std::string& text);

// The file's text for `entries` (oldest first), the newest `max` of them; ill-formed UTF-8
// becomes U+FFFD.
std::string InputHistoryText(const std::vector<std::string>& entries, size_t max = kInputHistoryMax);

// Where the history lives when the option names no file: $XDG_STATE_HOME/k3/chat-input-history.jsonl,
// else $HOME/.local/state/k3/...; empty (no history) without either.
std::string DefaultInputHistoryPath(const char* xdg_state_home, const char* home);
// The file for the `input_history` option: "off" none, "" the default, else the path given.
std::string InputHistoryFile(const std::string& option, const char* xdg_state_home, const char* home);

// A pasted block as one message: the terminal's line ends (CR, CR LF) become LF.
std::string PastedText(const std::string& raw);

}  // namespace k3::launch
