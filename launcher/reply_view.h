// How a chat reply is drawn on the terminal, the same for a local chat and --connect: the
// reasoning introduced by "thinking: " and dim on a terminal, the answer on its own line.
#pragma once
#include <functional>
#include <string>

#include "common/chat_format.h"

namespace k3::launch {

class ReplyView {
 public:
  using Channel = k3::ChannelSplitter::Channel;
  ReplyView(bool terminal, std::function<void(const std::string&)> out) : tty_(terminal), out_(std::move(out)) {}
  void Begin() { shown_ = Channel::kNone; }  // a new reply
  void Show(Channel ch, const std::string& text);
  void EndLine();  // ends the line the reply left open

 private:
  bool tty_;
  std::function<void(const std::string&)> out_;
  Channel shown_ = Channel::kNone;  // channel printed last
  bool line_open_ = false;          // something printed since the last newline
};

}  // namespace k3::launch
