#include "launcher/remote_api.h"

#include <charconv>

namespace k3::launch {
namespace {

using nlohmann::json;

// Model text may hold ill-formed UTF-8 (a reply cut mid-character): U+FFFD, never a throw.
json Text(const std::string& s) {
  return json::parse(json(s).dump(-1, ' ', false, json::error_handler_t::replace));
}

void AddSampling(json& r, const ipc::compute::Sampling& s, int64_t max_tokens, const std::vector<std::string>& stop,
                 bool ignore_eos, const char* max_key) {
  // The server's names (docs/server.md "Parameters"); repeat_last_n has none: the server's own applies.
  r["temperature"] = s.temperature;
  r["top_p"] = s.top_p;
  r["top_k"] = s.top_k;
  r["min_p"] = s.min_p;
  r["repetition_penalty"] = s.repeat_penalty;
  r["presence_penalty"] = s.presence_penalty;
  r["frequency_penalty"] = s.frequency_penalty;
  r["seed"] = s.seed;
  if (max_tokens > 0) r[max_key] = max_tokens;
  if (!stop.empty()) r["stop"] = stop;
  if (ignore_eos) r["ignore_eos"] = true;
  r["stream"] = true;
  r["stream_options"] = {{"include_usage", true}};
  r["return_token_ids"] = true;
}

std::optional<int64_t> IntAt(const json& j, const char* a, const char* b = nullptr) {
  if (!j.is_object() || !j.contains(a)) return std::nullopt;
  const json& v = b ? (j[a].is_object() && j[a].contains(b) ? j[a][b] : json()) : j[a];
  if (!v.is_number_integer()) return std::nullopt;
  return v.get<int64_t>();
}

std::string StringAt(const json& j, const char* key) {
  return j.is_object() && j.contains(key) && j[key].is_string() ? j[key].get<std::string>() : "";
}

}  // namespace

std::optional<ServerUrl> ParseServerUrl(const std::string& url, std::string* why) {
  auto fail = [&](const std::string& w) -> std::optional<ServerUrl> {
    if (why) *why = w;
    return std::nullopt;
  };
  const std::string scheme = "http://";
  if (url.rfind("https://", 0) == 0) return fail("https is not spoken; use http:// (a TLS proxy's plain side)");
  if (url.rfind(scheme, 0) != 0) return fail("want http://HOST:PORT");
  std::string rest = url.substr(scheme.size());
  ServerUrl u;
  const size_t slash = rest.find('/');
  if (slash != std::string::npos) {
    u.prefix = rest.substr(slash);
    rest.resize(slash);
  }
  while (!u.prefix.empty() && u.prefix.back() == '/') u.prefix.pop_back();
  if (u.prefix.size() >= 3 && u.prefix.compare(u.prefix.size() - 3, 3, "/v1") == 0) u.prefix.resize(u.prefix.size() - 3);
  if (u.prefix.find_first_of("?#") != std::string::npos) return fail("no query or fragment");
  if (rest.find('@') != std::string::npos) return fail("no user in the URL (the key: $K3_API_KEY, --api-key-file)");
  std::string port;
  if (!rest.empty() && rest[0] == '[') {
    const size_t close = rest.find(']');
    if (close == std::string::npos) return fail("an IPv6 address needs its closing ]");
    u.host = rest.substr(1, close - 1);
    if (close + 1 < rest.size()) {
      if (rest[close + 1] != ':') return fail("want [ADDRESS]:PORT");
      port = rest.substr(close + 2);
    }
  } else {
    const size_t colon = rest.rfind(':');
    u.host = rest.substr(0, colon);
    if (colon != std::string::npos) port = rest.substr(colon + 1);
    if (u.host.find(':') != std::string::npos) return fail("an IPv6 address goes in brackets: http://[::1]:8080");
  }
  if (u.host.empty()) return fail("no host");
  if (!port.empty() || (rest.find(':') != std::string::npos && rest.back() == ':')) {
    int p = 0;
    auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), p);
    if (port.empty() || ec != std::errc() || end != port.data() + port.size() || p < 1 || p > 65535)
      return fail("the port must be 1 to 65535");
    u.port = p;
  }
  return u;
}

std::string ServerUrlProblem(const std::string& url) {
  std::string why;
  return ParseServerUrl(url, &why) ? "" : "'" + url + "': " + why;
}

json ChatRequest(const std::string& model, const std::vector<ChatMessage>& history, const ChatSettings& s,
                 int64_t max_tokens, const std::vector<std::string>& stop, bool ignore_eos) {
  json messages = json::array();
  for (const ChatMessage& m : history) {
    json msg = {{"role", m.role}, {"content", Text(m.content)}};
    if (m.reasoning) msg["reasoning_content"] = Text(*m.reasoning);
    messages.push_back(std::move(msg));
  }
  json r = {{"model", model}, {"messages", std::move(messages)}};
  // reasoning_effort "none" is thinking off; low, high and max are K3's efforts (docs/server.md).
  r["reasoning_effort"] = s.thinking ? s.effort : "none";
  AddSampling(r, s.sampling, max_tokens, stop, ignore_eos, "max_completion_tokens");
  return r;
}

json CompletionRequest(const std::string& model, const std::string& prompt, const std::vector<int32_t>& ids,
                       const ipc::compute::Sampling& s, int64_t max_tokens, const std::vector<std::string>& stop,
                       bool ignore_eos) {
  json r = {{"model", model}};
  if (prompt.empty()) r["prompt"] = ids;
  else r["prompt"] = Text(prompt);
  AddSampling(r, s, max_tokens, stop, ignore_eos, "max_tokens");
  return r;
}

std::vector<std::string> SseSplitter::Push(std::string_view bytes) {
  buf_.append(bytes);
  std::vector<std::string> out;
  size_t at = 0;
  for (size_t nl; (nl = buf_.find('\n', at)) != std::string::npos; at = nl + 1) {
    std::string line = buf_.substr(at, nl - at);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) {  // the event ends
      if (has_data_) out.push_back(std::move(data_));
      data_.clear();
      has_data_ = false;
    } else if (line.rfind("data:", 0) == 0) {
      std::string d = line.substr(5);
      if (!d.empty() && d[0] == ' ') d.erase(0, 1);
      if (has_data_) data_ += '\n';
      data_ += d;
      has_data_ = true;
    }  // ":" comments (the server's keep-alive probe) and other fields: nothing to show
  }
  buf_.erase(0, at);
  return out;
}

StreamPiece ParseStreamData(const std::string& data) {
  StreamPiece p;
  if (data == "[DONE]") {
    p.done = true;
    return p;
  }
  const json j = json::parse(data, nullptr, false);
  if (!j.is_object()) throw RuntimeFailure("the server sent a stream event that is not JSON: " + data.substr(0, 120));
  if (j.contains("error")) {
    const std::string msg = j["error"].is_object() ? StringAt(j["error"], "message") : "";
    throw RuntimeFailure("the server failed the request: " + (msg.empty() ? j["error"].dump() : msg));
  }
  if (j.contains("usage") && j["usage"].is_object()) {
    const json& u = j["usage"];
    p.prompt_tokens = IntAt(u, "prompt_tokens");
    p.completion_tokens = IntAt(u, "completion_tokens");
    p.cached_tokens = IntAt(u, "prompt_tokens_details", "cached_tokens");
  }
  if (!j.contains("choices") || !j["choices"].is_array())
    throw RuntimeFailure("the server sent a chunk without choices: " + data.substr(0, 120));
  for (const json& c : j["choices"]) {
    if (c.contains("delta") && c["delta"].is_object()) {
      p.reasoning += StringAt(c["delta"], "reasoning_content");
      p.content += StringAt(c["delta"], "content");
    }
    p.content += StringAt(c, "text");
    if (c.contains("finish_reason") && c["finish_reason"].is_string()) p.finish_reason = c["finish_reason"];
    if (c.contains("token_ids") && c["token_ids"].is_array())
      for (const json& id : c["token_ids"])
        if (id.is_number_integer()) p.token_ids.push_back(id.get<int32_t>());
  }
  return p;
}

Error HttpFailure(const std::string& url, int status, const std::string& body) {
  const json j = json::parse(body, nullptr, false);
  std::string msg = j.is_object() && j.contains("error") && j["error"].is_object() ? StringAt(j["error"], "message") : "";
  const std::string said = msg.empty() ? "" : ": " + msg;
  const std::string at = url + " answered " + std::to_string(status);
  if (status == 401 || status == 403)
    return UsageError(at + said + " (the API key: $K3_API_KEY, --api-key-file or api_key in the TOML)");
  if (status == 429) return RuntimeFailure(at + said + " (the server is busy; try again)");
  if (status == 404) return UsageError(at + said + " (is the URL a k3-launch --serve?)");
  if (status >= 400 && status < 500) return UsageError(at + said);
  return RuntimeFailure(at + said);
}

std::string ServedModel(const std::string& body) {
  const json j = json::parse(body, nullptr, false);
  if (j.is_object() && j.contains("data") && j["data"].is_array() && !j["data"].empty() &&
      j["data"][0].is_object() && j["data"][0].contains("id") && j["data"][0]["id"].is_string())
    return j["data"][0]["id"];
  throw RuntimeFailure("the server's /v1/models is not a model list: " + body.substr(0, 120));
}

}  // namespace k3::launch
