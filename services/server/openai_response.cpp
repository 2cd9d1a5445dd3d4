#include "services/server/openai_response.h"

#include "services/server/timings.h"

namespace k3::server {
using nlohmann::json;

namespace {

json Bytes(const std::string& s) {
  json b = json::array();
  for (unsigned char c : s) b.push_back(static_cast<int>(c));
  return b;
}

bool IsChat(const Job& j) { return j.spec.endpoint == Endpoint::kChat; }

json Base(const ResponseIds& ids, const char* object) {
  return {{"id", ids.id}, {"object", object}, {"created", ids.created}, {"model", ids.model}, {"system_fingerprint", nullptr}};
}

// One piece of a streamed delta.tool_calls: a call's start, or a fragment of its arguments.
json ToolCallDeltaJson(const ToolCallDelta& t) {
  if (t.id.empty()) return {{"index", t.index}, {"function", {{"arguments", t.arguments}}}};
  return {{"index", t.index}, {"id", t.id}, {"type", "function"}, {"function", {{"name", t.name}, {"arguments", t.arguments}}}};
}

json ToolCallErrorsJson(const std::vector<CallProblem>& problems) {
  json out = json::array();
  for (const CallProblem& p : problems) out.push_back({{"error", p.error}, {"text", p.raw}});
  return out;
}

}  // namespace

json ErrorJson(const HttpError& e) {
  return {{"error", {{"message", e.message}, {"type", e.type}, {"param", nullptr},
                     {"code", e.code.empty() ? json(nullptr) : json(e.code)}}}};
}

std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

json UsageJson(const Job& j) {
  json u = {{"prompt_tokens", j.prompt_tokens},
            {"completion_tokens", j.completion_tokens},
            {"total_tokens", j.prompt_tokens + j.completion_tokens},
            {"prompt_tokens_details", {{"cached_tokens", j.cached_tokens}}}};
  if (IsChat(j)) u["completion_tokens_details"] = {{"reasoning_tokens", j.reasoning_tokens}};
  return u;
}

json LogprobsJson(Endpoint e, const std::vector<TokenLogprob>& tokens, size_t offset) {
  if (e == Endpoint::kChat) {
    json content = json::array();
    for (const TokenLogprob& t : tokens) {
      json top = json::array();
      for (const auto& [text, lp] : t.top) top.push_back({{"token", text}, {"logprob", lp}, {"bytes", Bytes(text)}});
      content.push_back({{"token", t.text}, {"logprob", t.logprob}, {"bytes", Bytes(t.text)}, {"top_logprobs", top}});
    }
    return {{"content", content}, {"refusal", nullptr}};
  }
  json toks = json::array(), lps = json::array(), tops = json::array(), offs = json::array();
  for (const TokenLogprob& t : tokens) {
    toks.push_back(t.text);
    lps.push_back(t.logprob);
    json top = json::object();
    for (const auto& [text, lp] : t.top) top[text] = lp;
    tops.push_back(top);
    offs.push_back(offset);
    offset += t.text.size();
  }
  return {{"tokens", toks}, {"token_logprobs", lps}, {"top_logprobs", tops}, {"text_offset", offs}};
}

json FullResponse(const ResponseIds& ids, const Job& j, const std::vector<Delta>& deltas) {
  std::string reasoning, content;
  std::vector<TokenLogprob> lps;
  json calls = json::array();
  for (const Delta& d : deltas) {
    reasoning += d.reasoning;
    content += d.content;
    lps.insert(lps.end(), d.logprobs.begin(), d.logprobs.end());
    for (const ToolCallDelta& t : d.tool_calls) {
      if (!t.id.empty()) calls.push_back(ToolCallDeltaJson(t));  // its start: id, name, arguments ""
      else calls.back()["function"]["arguments"] = calls.back()["function"]["arguments"].get<std::string>() + t.arguments;
    }
  }
  const json logprobs = j.spec.logprobs >= 0 ? LogprobsJson(j.spec.endpoint, lps, 0) : json(nullptr);
  json choice;
  if (IsChat(j)) {
    json msg = {{"role", "assistant"}, {"content", content}, {"refusal", nullptr}};
    if (j.spec.thinking) msg["reasoning_content"] = reasoning;
    if (!calls.empty()) {
      for (json& c : calls) c.erase("index");
      msg["tool_calls"] = calls;
      if (content.empty()) msg["content"] = nullptr;  // as OpenAI answers a reply of calls only
    }
    if (!j.tool_call_errors.empty()) msg["tool_call_errors"] = ToolCallErrorsJson(j.tool_call_errors);
    choice = {{"index", 0}, {"message", msg}, {"logprobs", logprobs}, {"finish_reason", j.finish_reason}};
  } else {
    choice = {{"index", 0}, {"text", content}, {"logprobs", logprobs}, {"finish_reason", j.finish_reason}};
  }
  if (j.spec.return_token_ids) choice["token_ids"] = j.token_ids;
  json r = Base(ids, IsChat(j) ? "chat.completion" : "text_completion");
  r["choices"] = json::array({choice});
  r["usage"] = UsageJson(j);
  r["timings"] = TimingsJson(j);
  if (j.spec.return_token_ids) r["prompt_token_ids"] = j.prompt_ids;
  return r;
}

json Chunk(const ResponseIds& ids, const Job& j, const Delta* d, bool first, const std::string& finish,
           size_t text_offset) {
  const json fin = finish.empty() ? json(nullptr) : json(finish);
  const json logprobs =
      d && j.spec.logprobs >= 0 ? LogprobsJson(j.spec.endpoint, d->logprobs, text_offset) : json(nullptr);
  json choice;
  if (IsChat(j)) {
    json delta = json::object();
    if (first) delta["role"] = "assistant";
    if (d && !d->reasoning.empty()) delta["reasoning_content"] = d->reasoning;
    if (d && (!d->content.empty() || first)) delta["content"] = d ? d->content : "";
    if (first && !d) delta["content"] = "";
    if (d && !d->tool_calls.empty()) {
      delta["tool_calls"] = json::array();
      for (const ToolCallDelta& t : d->tool_calls) delta["tool_calls"].push_back(ToolCallDeltaJson(t));
    }
    choice = {{"index", 0}, {"delta", delta}, {"logprobs", logprobs}, {"finish_reason", fin}};
    if (!finish.empty() && !j.tool_call_errors.empty()) choice["tool_call_errors"] = ToolCallErrorsJson(j.tool_call_errors);
  } else {
    choice = {{"index", 0}, {"text", d ? d->content : ""}, {"logprobs", logprobs}, {"finish_reason", fin}};
  }
  if (!finish.empty() && j.spec.return_token_ids) choice["token_ids"] = j.token_ids;
  json r = Base(ids, IsChat(j) ? "chat.completion.chunk" : "text_completion");
  r["choices"] = json::array({choice});
  if (j.spec.include_usage) r["usage"] = nullptr;
  if (!finish.empty()) r["timings"] = TimingsJson(j);  // the last chunk, as llama.cpp's server does
  return r;
}

json UsageChunk(const ResponseIds& ids, const Job& j) {
  json r = Base(ids, IsChat(j) ? "chat.completion.chunk" : "text_completion");
  r["choices"] = json::array();
  r["usage"] = UsageJson(j);
  return r;
}

}  // namespace k3::server
