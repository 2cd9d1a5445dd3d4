#include "launcher/reply_view.h"

namespace k3::launch {

void ReplyView::EndLine() {
  if (line_open_) out_("\n");
  line_open_ = false;
}

void ReplyView::Show(Channel ch, const std::string& text) {
  if (text.empty()) return;
  std::string s;
  if (ch != shown_) {
    if (line_open_) s += "\n";
    if (ch == Channel::kThink) s += tty_ ? "\x1b[2mthinking: \x1b[0m" : "thinking: ";
    shown_ = ch;
  }
  s += ch == Channel::kThink && tty_ ? "\x1b[2m" + text + "\x1b[0m" : text;
  out_(s);
  line_open_ = s.back() != '\n';
}

}  // namespace k3::launch
