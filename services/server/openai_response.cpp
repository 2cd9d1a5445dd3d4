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
  for (const Delta& d : deltas) {
    reasoning += d.reasoning;
    content += d.content;
    lps.insert(lps.end(), d.logprobs.begin(), d.logprobs.end());
  }
  const json logprobs = j.spec.logprobs >= 0 ? LogprobsJson(j.spec.endpoint, lps, 0) : json(nullptr);
  json choice;
  if (IsChat(j)) {
    json msg = {{"role", "assistant"}, {"content", content}, {"refusal", nullptr}};
    if (j.spec.thinking) msg["reasoning_content"] = reasoning;
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
    choice = {{"index", 0}, {"delta", delta}, {"logprobs", logprobs}, {"finish_reason", fin}};
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
