#include "service_core.h"

#include <algorithm>

#include "common/error.h"
#include "chat_template.h"
#include "history.h"

namespace k3::tok {
namespace tk = ipc::tokenizer;

namespace {

tk::Failed Fail(uint64_t id, tk::Error e, std::string detail) { return tk::Failed{id, e, std::move(detail)}; }

// Ids arrive as int32 on the wire; a negative one is as unknown as one past the vocabulary.
bool ToIds(const std::vector<int32_t>& in, std::vector<uint32_t>* out, std::string* bad) {
  out->reserve(in.size());
  for (int32_t v : in) {
    if (v < 0) {
      *bad = "id " + std::to_string(v) + " is negative";
      return false;
    }
    out->push_back(static_cast<uint32_t>(v));
  }
  return true;
}

std::vector<int32_t> ToWire(const std::vector<uint32_t>& ids) { return {ids.begin(), ids.end()}; }

}  // namespace

std::optional<tk::Message> TokenizerService::Handle(const tk::Message& m) {
  std::optional<tk::Message> reply;
  if (const auto* e = std::get_if<tk::Encode>(&m)) reply = OnEncode(*e);
  else if (const auto* d = std::get_if<tk::Decode>(&m)) reply = OnDecode(*d);
  else if (const auto* c = std::get_if<tk::RenderChat>(&m)) reply = OnRenderChat(*c);
  else {
    ++counters_.rejected;  // EncodedIds / Decoded / Failed flow only from the service
    return std::nullopt;
  }
  ++counters_.requests;
  if (std::holds_alternative<tk::Failed>(*reply)) ++counters_.failed;
  return reply;
}

tk::Message TokenizerService::OnEncode(const tk::Encode& m) {
  counters_.encoded_bytes += m.text.size();
  return tk::EncodedIds{m.request_id, ToWire(tok_.Encode(m.text, m.allow_special))};
}

StreamDecoder& TokenizerService::Stream(uint64_t id) {
  auto it = streams_.find(id);
  if (it != streams_.end()) return it->second;
  if (streams_.size() >= kMaxStreams) {
    streams_.erase(stream_order_.front());
    stream_order_.pop_front();
  }
  stream_order_.push_back(id);
  return streams_.emplace(id, StreamDecoder(tok_)).first->second;
}

tk::Message TokenizerService::OnDecode(const tk::Decode& m) {
  std::vector<uint32_t> ids;
  std::string bad;
  auto forget = [&] {
    streams_.erase(m.request_id);
    stream_order_.erase(std::remove(stream_order_.begin(), stream_order_.end(), m.request_id), stream_order_.end());
  };
  if (!ToIds(m.ids, &ids, &bad)) {
    if (m.stream) forget();
    return Fail(m.request_id, tk::Error::kUnknownId, bad);
  }
  counters_.decoded_ids += ids.size();
  try {
    if (!m.stream) return tk::Decoded{m.request_id, tok_.Decode(ids)};
    StreamDecoder& s = Stream(m.request_id);
    std::string text;
    for (uint32_t id : ids) text += s.Push(id);
    if (m.final) {
      text += s.Finish();
      forget();
    }
    return tk::Decoded{m.request_id, std::move(text)};
  } catch (const Error& e) {
    if (m.stream) forget();  // its held-back bytes are no longer meaningful
    return Fail(m.request_id, tk::Error::kUnknownId, e.what());
  }
}

tk::Message TokenizerService::OnRenderChat(const tk::RenderChat& m) {
  counters_.encoded_bytes += m.history_jsonl.size() + m.tools_json.size();
  const std::string effort = m.thinking_effort.empty() ? "max" : m.thinking_effort;
  if (m.thinking && !IsValidThinkingEffort(effort))
    return Fail(m.request_id, tk::Error::kUnsupported, "thinking effort must be low, high or max");
  try {
    std::vector<ChatMessage> msgs;
    size_t p = 0, line = 1;
    const std::string& h = m.history_jsonl;
    while (p < h.size()) {
      size_t nl = h.find('\n', p);
      if (nl == std::string::npos) nl = h.size();
      msgs.push_back(ParseHistoryLine(std::string_view(h).substr(p, nl - p), "history:" + std::to_string(line)));
      p = nl + 1;
      ++line;
    }
    ValidateConversation(msgs, "history");
    ChatOptions opt;
    opt.thinking = m.thinking;
    opt.thinking_effort = effort;
    opt.tools_json = m.tools_json;
    opt.tool_choice = static_cast<ToolChoice>(m.tool_choice);  // the same four values, in the same order
    opt.continue_final = m.continue_final;
    opt.forced_call = m.forced_call;
    return tk::EncodedIds{m.request_id, ToWire(ChatTemplate(tok_).Render(msgs, opt, !m.continue_final))};
  } catch (const Error& e) {
    return Fail(m.request_id, tk::Error::kBadInput, e.what());
  }
}

}  // namespace k3::tok
