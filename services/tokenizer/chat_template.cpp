#include "chat_template.h"

#include <algorithm>

#include "common/error.h"
#include "utf8.h"

namespace k3::tok {

const char* RoleName(Role r) {
  switch (r) {
    case Role::kSystem: return "system";
    case Role::kUser: return "user";
    case Role::kAssistant: return "assistant";
  }
  return "?";
}

bool IsValidThinkingEffort(const std::string& effort) {
  // The released encoder refuses "medium" although the preamble text names it.
  return effort == "low" || effort == "high" || effort == "max";
}

std::string ThinkingEffortText(const std::string& effort) {
  return "`thinking_effort` guides on how much to think in your thinking channel (not including "
         "the response channel), supported values include `low`, `medium`, `high`, and `max`.\n"
         "Now the system is invoked with `thinking_effort=" +
         effort + "`.";
}

ChatTemplate::ChatTemplate(const Tokenizer& tok) : tok_(tok) {
  auto need = [&](const char* name) {
    const uint32_t id = tok_.vocab().AddedId(name);
    if (id == kNoRank)
      throw BadInput(std::string("tokenizer_config.json has no added token \"") + name +
                     "\" needed by the chat template");
    return id;
  };
  open_ = need("<|open|>");
  close_ = need("<|close|>");
  sep_ = need("<|sep|>");
  eom_ = need("<|end_of_msg|>");
  eos_ = need("[EOS]");
}

void ChatTemplate::Control(std::string_view s, std::vector<uint32_t>* out) const {
  const auto ids = tok_.Encode(s, /*allow_special=*/true);
  out->insert(out->end(), ids.begin(), ids.end());
}

void ChatTemplate::Text(std::string_view s, std::vector<uint32_t>* out) const {
  tok_.EncodeOrdinary(s, out);
}

std::vector<uint32_t> ChatTemplate::Ids(std::string_view control) const {
  return tok_.Encode(control, true);
}

std::vector<uint32_t> ChatTemplate::Render(const std::vector<ChatMessage>& messages,
                                           const ChatOptions& opt, bool add_generation_prompt) const {
  if (opt.thinking && !IsValidThinkingEffort(opt.thinking_effort))
    throw BadInput("thinking effort must be low, high or max, not \"" + opt.thinking_effort + "\"");
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    const bool order_ok = m.role == Role::kSystem ? i == 0
                          : m.role == Role::kUser
                              ? (i == 0 || messages[i - 1].role != Role::kUser)
                              : (i > 0 && messages[i - 1].role == Role::kUser);
    if (!order_ok)
      throw BadInput("message " + std::to_string(i + 1) + " (" + RoleName(m.role) +
                     ") is out of order: system first, then user/assistant alternating");
    if (m.reasoning_content && m.role != Role::kAssistant)
      throw BadInput("message " + std::to_string(i + 1) + ": only assistant messages carry reasoning_content");
  }
  if (add_generation_prompt && (messages.empty() || messages.back().role != Role::kUser))
    throw BadInput("a generation prompt needs a transcript that ends with a user message");

  std::vector<uint32_t> out;
  const std::string eom = "<|close|>message<|sep|><|end_of_msg|>";
  if (opt.thinking) {
    Control("<|open|>message role=\"system\" type=\"thinking-effort\"<|sep|>", &out);
    Text(ThinkingEffortText(opt.thinking_effort), &out);  // one segment: BPE merges across "=max"
    Control(eom, &out);
  }
  for (const ChatMessage& m : messages) {
    Control(std::string("<|open|>message role=\"") + RoleName(m.role) + "\"<|sep|>", &out);
    if (m.role == Role::kAssistant) {
      if (opt.thinking) {
        Control("<|open|>think<|sep|>", &out);
        Text(m.reasoning_content.value_or(""), &out);
        Control("<|close|>think<|sep|>", &out);
      }
      Control("<|open|>response<|sep|>", &out);
      Text(m.content, &out);
      Control("<|close|>response<|sep|>", &out);
    } else {
      Text(m.content, &out);
    }
    Control(eom, &out);
  }
  if (add_generation_prompt) {
    Control("<|open|>message role=\"assistant\"<|sep|>", &out);
    Control(opt.thinking ? "<|open|>think<|sep|>" : "<|open|>response<|sep|>", &out);
  }
  return out;
}

Completion ChatTemplate::ParseCompletion(const std::vector<uint32_t>& ids, bool thinking) const {
  const Vocab& v = tok_.vocab();
  auto first_added = [&](size_t from) {
    for (size_t i = from; i < ids.size(); ++i)
      if (v.IsAdded(ids[i])) return i;
    return ids.size();
  };
  auto expect = [&](size_t at, const std::vector<uint32_t>& seq, const char* what) {
    if (at + seq.size() > ids.size() || !std::equal(seq.begin(), seq.end(), ids.begin() + at))
      throw BadInput(std::string("completion: expected ") + what + " at id position " + std::to_string(at));
    return at + seq.size();
  };
  auto payload = [&](size_t from, size_t to, const char* what) {
    std::string s = tok_.Decode(std::vector<uint32_t>(ids.begin() + from, ids.begin() + to));
    if (!IsValidUtf8(s)) throw BadInput(std::string("completion: ") + what + " is not valid UTF-8");
    return s;
  };
  Completion c;
  size_t p = 0;
  if (thinking) {
    const size_t b = first_added(0);
    p = expect(b, Ids("<|close|>think<|sep|><|open|>response<|sep|>"), "the think/response boundary");
    c.reasoning_content = payload(0, b, "reasoning");
  }
  const size_t e = first_added(p);
  const size_t after = expect(e, Ids("<|close|>response<|sep|><|close|>message<|sep|>"), "the end of the response channel");
  c.content = payload(p, e, "content");
  if (after >= ids.size() || (ids[after] != eom_ && ids[after] != eos_))
    throw BadInput("completion: expected <|end_of_msg|> or [EOS] at id position " + std::to_string(after));
  if (after + 1 != ids.size())
    throw BadInput("completion: " + std::to_string(ids.size() - after - 1) + " ids after the end of the message");
  c.end_id = ids[after];
  return c;
}

}  // namespace k3::tok
