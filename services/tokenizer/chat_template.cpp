#include "chat_template.h"

#include <algorithm>

#include "common/error.h"
#include "history.h"
#include "utf8.h"

namespace k3::tok {

const char* RoleName(Role r) {
  switch (r) {
    case Role::kSystem: return "system";
    case Role::kUser: return "user";
    case Role::kAssistant: return "assistant";
    case Role::kTool: return "tool";
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

void ChatTemplate::Append(const Segments& segments, std::vector<uint32_t>* out) const {
  for (const Segment& s : segments) s.control ? Control(s.text, out) : Text(s.text, out);
}

namespace {

// Each tool message's (name, index): a run of results is put in the order of the calls they
// answer (ValidateConversation checked each answers one call of the assistant message before
// it), numbered from 1, named by its call, as the released encoder does.
std::vector<size_t> ToolResultOrder(const std::vector<ChatMessage>& messages, size_t run_begin, size_t run_end,
                                    const ChatMessage& assistant) {
  std::vector<size_t> order;
  for (size_t i = run_begin; i < run_end; ++i) order.push_back(i);
  auto call_of = [&](size_t i) {
    for (size_t c = 0; c < assistant.tool_calls.size(); ++c)
      if (assistant.tool_calls[c].id == messages[i].tool_call_id) return c;
    return assistant.tool_calls.size();
  };
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return call_of(a) < call_of(b); });
  return order;
}

const ToolCall& CallAnswered(const ChatMessage& result, const ChatMessage& assistant) {
  for (const ToolCall& c : assistant.tool_calls)
    if (c.id == result.tool_call_id) return c;
  throw BadInput("tool message answers no call of the assistant message before it");
}

}  // namespace

std::vector<uint32_t> ChatTemplate::Ids(std::string_view control) const {
  return tok_.Encode(control, true);
}

std::vector<uint32_t> ChatTemplate::Render(const std::vector<ChatMessage>& messages,
                                           const ChatOptions& opt, bool add_generation_prompt) const {
  if (opt.thinking && !IsValidThinkingEffort(opt.thinking_effort))
    throw BadInput("thinking effort must be low, high or max, not \"" + opt.thinking_effort + "\"");
  ValidateConversation(messages, "conversation");
  if (opt.continue_final && (add_generation_prompt || messages.empty() || messages.back().role != Role::kAssistant ||
                             opt.tool_choice != ToolChoice::kAuto))
    throw BadInput("continuing the final message needs a conversation that ends with an assistant message, "
                   "no generation prompt and no tool choice");
  if (!opt.forced_call.empty() && (opt.thinking || !add_generation_prompt))
    throw BadInput("a forced call needs thinking off and a generation prompt");
  if (add_generation_prompt &&
      (messages.empty() || (messages.back().role != Role::kUser && messages.back().role != Role::kTool)))
    throw BadInput("a generation prompt needs a transcript that ends with a user or tool message");

  std::vector<uint32_t> out;
  const std::string eom = "<|close|>message<|sep|><|end_of_msg|>";
  if (!opt.tools_json.empty()) Append(ToolDeclaration(opt.tools_json), &out);
  if (opt.thinking) {
    Control("<|open|>message role=\"system\" type=\"thinking-effort\"<|sep|>", &out);
    Text(ThinkingEffortText(opt.thinking_effort), &out);  // one segment: BPE merges across "=max"
    Control(eom, &out);
  }
  const ChatMessage* last_assistant = nullptr;
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (m.role == Role::kTool) {
      size_t end = i;
      while (end < messages.size() && messages[end].role == Role::kTool) ++end;
      const std::vector<size_t> order = ToolResultOrder(messages, i, end, *last_assistant);
      for (size_t k = 0; k < order.size(); ++k) {
        const ChatMessage& r = messages[order[k]];
        Segments seg;
        Message({{"role", "tool"}, {"tool", CallAnswered(r, *last_assistant).name}, {"index", std::to_string(k + 1)}},
                r.content, &seg);
        Append(seg, &out);
      }
      i = end - 1;
      continue;
    }
    if (m.role == Role::kAssistant) last_assistant = &m;
    Control(std::string("<|open|>message role=\"") + RoleName(m.role) + "\"<|sep|>", &out);
    if (m.role == Role::kAssistant) {
      if (opt.thinking) {
        Control("<|open|>think<|sep|>", &out);
        Text(m.reasoning_content.value_or(""), &out);
        Control("<|close|>think<|sep|>", &out);
      }
      Control("<|open|>response<|sep|>", &out);
      Text(m.content, &out);
      const bool open_end = opt.continue_final && i + 1 == messages.size();
      if (open_end && m.tool_calls.empty()) break;  // the model continues the response
      Control("<|close|>response<|sep|>", &out);
      if (!m.tool_calls.empty()) {
        Segments calls = ToolsChannel(m.tool_calls);
        if (open_end) calls.resize(calls.size() - 3);  // without <|close|>tools<|sep|>: the model may call more
        Append(calls, &out);
        if (open_end) break;
      }
    } else {
      Text(m.content, &out);
    }
    Control(eom, &out);
  }
  if (opt.continue_final) return out;
  Append(ToolChoiceMessage(opt.tool_choice), &out);
  if (add_generation_prompt) {
    Control("<|open|>message role=\"assistant\"<|sep|>", &out);
    Control(opt.thinking ? "<|open|>think<|sep|>" : "<|open|>response<|sep|>", &out);
    if (!opt.forced_call.empty()) {
      Control("<|close|>response<|sep|>", &out);  // the empty response, then the calls (figure 16)
      Append(ForcedCallOpening(opt.forced_call), &out);
    }
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
