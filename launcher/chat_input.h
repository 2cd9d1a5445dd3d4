// The chat's input (docs/chat.md "Keys"). On a terminal, lines come through libedit (BSD,
// Debian's libedit): arrow keys, Home/End, Ctrl-A/E and the rest of its emacs bindings;
// Up/Down recall the input history, kept across sessions in a file (input_history.h); a
// bracketed paste is inserted whole, newlines included, so a pasted block is one message;
// Ctrl-D on an empty line is the end of input. Otherwise (a pipe, a file) lines are read as
// they come, one message per line, with no history. Both wait through the caller's loop, so the
// pipeline keeps running while the user types.
#pragma once
#include <functional>
#include <memory>
#include <string>

namespace k3::launch {

// What the caller's wait saw: stdin readable, nothing yet, Ctrl-C (consumed), or the session stopping.
enum class Wake { kReady, kIdle, kInterrupt, kStop };
// Waits a short while for stdin (fd 0), running the caller's loop meanwhile.
using WaitForInput = std::function<Wake()>;

enum class Input { kLine, kEof, kInterrupt, kStop };

class ChatInput {
 public:
  // `terminal`: edit lines with libedit (stdin and stdout are terminals). `history_path`: the
  // input history file ("" for none); `note` prints one stderr line (a history file that cannot
  // be read or written is a note, never the end of the session).
  ChatInput(bool terminal, std::string history_path, WaitForInput wait, std::function<void(const std::string&)> note);
  ~ChatInput();
  ChatInput(const ChatInput&) = delete;
  ChatInput& operator=(const ChatInput&) = delete;

  // The next message, without its line end.
  Input Read(std::string* line);

 private:
  struct Editor;
  Input ReadPiped(std::string* line);
  WaitForInput wait_;
  std::unique_ptr<Editor> editor_;  // null when not a terminal
  std::string inbuf_;               // piped bytes after the last line returned
  bool eof_ = false;
};

}  // namespace k3::launch
