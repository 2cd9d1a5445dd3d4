#include "common/chat_format.h"

#include <nlohmann/json.hpp>

namespace k3 {

ChannelSplitter::ChannelSplitter(const ChatControlIds& ids, bool thinking)
    : ids_(ids), channel_(thinking ? Channel::kThink : Channel::kResponse) {}

ChannelSplitter::Channel ChannelSplitter::Push(int32_t id) {
  if (ended_) return Channel::kNone;
  if (id == ids_.eom || id == ids_.eos) {
    ended_ = true;
    return Channel::kNone;
  }
  if (channel_ == Channel::kTools) {  // nested elements: only <|close|>tools<|sep|> ends it
    if (id == ids_.close) {
      in_tag_ = true;
      tag_.clear();
    } else if (id == ids_.open) {
      in_tag_ = false;
    } else if (in_tag_ && id == ids_.sep) {
      in_tag_ = false;
      if (tag_ == ids_.tools) channel_ = Channel::kNone;
    } else if (in_tag_) {
      tag_.push_back(id);
    }
    return Channel::kTools;
  }
  if (id == ids_.open || id == ids_.close) {
    in_tag_ = true;
    opening_ = id == ids_.open;
    tag_.clear();
    return Channel::kNone;
  }
  if (in_tag_) {
    if (id != ids_.sep) {
      tag_.push_back(id);
      return Channel::kNone;
    }
    in_tag_ = false;
    if (!opening_) channel_ = Channel::kNone;
    else if (tag_ == ids_.tools) channel_ = Channel::kTools;
    else if (tag_ == ids_.think) channel_ = Channel::kThink;
    else if (tag_ == ids_.response) channel_ = Channel::kResponse;
    else channel_ = Channel::kNone;  // <|open|>message ...: not a channel of this reply
    return Channel::kNone;
  }
  return channel_;
}

size_t CompleteUtf8Prefix(const std::string& s) {
  const size_t n = s.size();
  for (size_t back = 1; back <= 4 && back <= n; ++back) {
    const auto c = static_cast<unsigned char>(s[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // a continuation byte: look further back
    const size_t need = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 1;
    return back < need ? n - back : n;
  }
  return n;
}

std::string HistoryJsonl(const std::vector<ChatMessage>& messages) {
  std::string out;
  for (const ChatMessage& m : messages) {
    nlohmann::json j = {{"role", m.role}, {"content", m.content}};
    if (m.reasoning) j["reasoning_content"] = *m.reasoning;
    for (const ChatToolCall& c : m.tool_calls)
      j["tool_calls"].push_back(
          {{"id", c.id}, {"type", "function"}, {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
    if (m.tool_call_id) j["tool_call_id"] = *m.tool_call_id;
    out += j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  }
  return out;
}

int64_t BeforeNewestMessage(const std::vector<int32_t>& ids, int32_t eom) {
  int seen = 0;
  for (size_t i = ids.size(); i-- > 0;)
    if (ids[i] == eom && ++seen == 2) return static_cast<int64_t>(i) + 1;
  return 0;
}

}  // namespace k3
