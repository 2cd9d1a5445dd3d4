#include "services/server/openai_request.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <limits>

#include "common/sampling_check.h"
#include "common/sampling_params.h"
#include "services/server/field_policy.h"
#include "services/server/response_format.h"
#include "services/server/tool_request.h"

namespace k3::server {
namespace {
using nlohmann::json;

struct Bad {
  std::string message;
};

HttpError Invalid(const std::string& message, const std::string& param = {}) {
  HttpError e;
  e.status = 400;
  e.message = message;
  e.code = param.empty() ? "" : "invalid_value";
  return e;
}

double Number(const json& j, const char* name) {
  if (!j.is_number()) throw Bad{std::string("'") + name + "' must be a number"};
  const double v = j.get<double>();
  if (!std::isfinite(v)) throw Bad{std::string("'") + name + "' must be finite"};
  return v;
}

int64_t Integer(const json& j, const char* name) {
  if (j.is_number_integer() && !j.is_number_unsigned()) return j.get<int64_t>();
  if (j.is_number_unsigned()) {  // (is_number_integer is true for these too)
    const uint64_t u = j.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) throw Bad{std::string("'") + name + "' is too large"};
    return static_cast<int64_t>(u);
  }
  // Past 2^64 the parser holds an integer as a float.
  if (j.is_number_float() && std::abs(j.get<double>()) >= 0x1p63 && std::nearbyint(j.get<double>()) == j.get<double>())
    throw Bad{std::string("'") + name + "' is too large"};
  throw Bad{std::string("'") + name + "' must be an integer"};
}

bool Boolean(const json& j, const char* name) {
  if (!j.is_boolean()) throw Bad{std::string("'") + name + "' must be true or false"};
  return j.get<bool>();
}

const json* Field(const json& body, const char* name) {
  const auto it = body.find(name);
  return it == body.end() || it->is_null() ? nullptr : &*it;
}

// "--top-p 0: must be in (0, 1]" -> "'top_p' 1e-50: must be in (0, 1]": the request's names,
// and its value as it was sent (a float field holds 1e-50 as 0).
std::string RequestNames(std::string s, const json& body) {
  if (s.rfind("--", 0) != 0) return s;
  size_t end = s.find(' ');
  if (end == std::string::npos) end = s.size();
  std::string name = s.substr(2, end - 2);
  for (char& c : name)
    if (c == '-') c = '_';
  if (name == "repeat_penalty") name = "repetition_penalty";  // the request's field (vLLM's name)
  std::string rest = s.substr(end);
  if (const auto it = body.find(name); it != body.end() && it->is_number() && rest.find(':') != std::string::npos)
    rest = " " + it->dump() + rest.substr(rest.find(':'));
  return "'" + name + "'" + rest;
}

// A message's content: a string, or an array of {"type": "text", "text": ...} parts.
std::string Content(const json& c, size_t i) {
  if (c.is_string()) return c.get<std::string>();
  if (!c.is_array()) throw Bad{"messages[" + std::to_string(i) + "].content must be a string or an array of text parts"};
  std::string out;
  for (const json& part : c) {
    if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") || !part["text"].is_string())
      throw Bad{"messages[" + std::to_string(i) + "].content: only text parts ({\"type\": \"text\", \"text\": ...}) are supported"};
    out += part["text"].get<std::string>();
  }
  return out;
}

void ParseChat(const json& body, RequestSpec& r) {
  const json* msgs = Field(body, "messages");
  if (!msgs) throw Bad{"'messages' is required"};
  if (!msgs->is_array() || msgs->empty()) throw Bad{"'messages' must be a non-empty array"};
  for (size_t i = 0; i < msgs->size(); ++i) {
    const json& m = (*msgs)[i];
    if (!m.is_object()) throw Bad{"messages[" + std::to_string(i) + "] must be an object"};
    const json* role = Field(m, "role");
    if (!role || !role->is_string()) throw Bad{"messages[" + std::to_string(i) + "].role is required"};
    std::string name = role->get<std::string>();
    if (name == "developer") name = "system";  // OpenAI's newer name for the system message
    if (name != "system" && name != "user" && name != "assistant" && name != "tool")
      throw Bad{"messages[" + std::to_string(i) + "].role '" + name + "' is not supported (system, user, assistant, tool)"};
    const json* content = Field(m, "content");
    ChatMessage cm{name, content ? Content(*content, i) : std::string(), std::nullopt};
    if (const json* rc = Field(m, "reasoning_content"); rc && name == "assistant") {
      if (!rc->is_string()) throw Bad{"messages[" + std::to_string(i) + "].reasoning_content must be a string"};
      cm.reasoning = rc->get<std::string>();
    }
    ParseMessageToolFields(m, i, name, cm);
    r.messages.push_back(std::move(cm));
  }
  CheckToolMessageNames(*msgs, r.messages);
  ParseToolFields(body, r);
  // vLLM's prefill: the model continues the last (assistant) message (docs/server.md).
  if (const json* c = Field(body, "continue_final_message")) r.continue_final = Boolean(*c, "continue_final_message");
  if (const json* g = Field(body, "add_generation_prompt"); g && Boolean(*g, "add_generation_prompt") == r.continue_final)
    throw Bad{"'add_generation_prompt' must be the opposite of 'continue_final_message'"};
  if (r.continue_final && r.messages.back().role != "assistant")
    throw Bad{"'continue_final_message' needs a last message from the assistant"};
  if (r.continue_final && r.tools.choice != ipc::tokenizer::ToolChoice::kAuto)
    throw Bad{"'continue_final_message' cannot go with 'tool_choice' (the template puts it after the last message)"};
  if (const json* e = Field(body, "reasoning_effort")) {
    if (!e->is_string()) throw Bad{"'reasoning_effort' must be a string"};
    const std::string v = e->get<std::string>();
    // K3's template knows low, high and max; OpenAI's names map onto them.
    if (v == "none") r.thinking = false;
    else if (v == "low" || v == "minimal") r.effort = "low";
    else if (v == "medium" || v == "high") r.effort = "high";
    else if (v == "max") r.effort = "max";
    else throw Bad{"'reasoning_effort' must be none, minimal, low, medium, high or max"};
  }
  if (const json* k = Field(body, "chat_template_kwargs")) {  // vLLM's way to switch thinking off
    if (!k->is_object()) throw Bad{"'chat_template_kwargs' must be an object"};
    for (const char* key : {"thinking", "enable_thinking"})
      if (const json* t = Field(*k, key)) r.thinking = Boolean(*t, key);
  }
  if (const json* lp = Field(body, "logprobs"); lp && Boolean(*lp, "logprobs")) {
    r.logprobs = 0;
    if (const json* top = Field(body, "top_logprobs")) {
      const int64_t n = Integer(*top, "top_logprobs");
      if (n < 0 || n > kMaxRequestLogprobs) throw Bad{"'top_logprobs' must be 0 to " + std::to_string(kMaxRequestLogprobs)};
      r.logprobs = static_cast<int32_t>(n);
    }
  } else if (Field(body, "top_logprobs")) {
    throw Bad{"'top_logprobs' needs 'logprobs': true"};
  }
  const char* name = "max_completion_tokens";
  const json* mt = Field(body, name);
  if (!mt) mt = Field(body, name = "max_tokens");
  if (mt) r.max_tokens = Integer(*mt, name);
  r.max_tokens_field = name;
  if (r.max_tokens && *r.max_tokens < 1) throw Bad{std::string("'") + name + "' must be at least 1"};
}

void ParseCompletion(const json& body, RequestSpec& r) {
  const json* p = Field(body, "prompt");
  if (!p) throw Bad{"'prompt' is required"};
  if (p->is_string()) {
    r.prompt_text = p->get<std::string>();
    if (r.prompt_text.empty()) throw Bad{"'prompt' must not be empty"};
  } else if (p->is_array() && !p->empty() && (*p)[0].is_number()) {
    std::vector<int32_t> ids;
    for (const json& id : *p) {
      const int64_t v = Integer(id, "prompt");
      if (v < 0 || v > std::numeric_limits<int32_t>::max()) throw Bad{"'prompt' token id " + std::to_string(v) + " is out of range"};
      ids.push_back(static_cast<int32_t>(v));
    }
    r.prompt_ids = std::move(ids);
  } else if (p->is_array() && p->size() == 1 && (*p)[0].is_string()) {
    r.prompt_text = (*p)[0].get<std::string>();
    if (r.prompt_text.empty()) throw Bad{"'prompt' must not be empty"};
  } else {
    throw Bad{"'prompt' must be a string or an array of token ids (one prompt per request)"};
  }
  if (const json* lp = Field(body, "logprobs")) {
    const int64_t n = lp->is_boolean() ? (lp->get<bool>() ? 0 : -1) : Integer(*lp, "logprobs");
    if (n > kMaxRequestLogprobs || n < -1) throw Bad{"'logprobs' must be 0 to " + std::to_string(kMaxRequestLogprobs)};
    r.logprobs = static_cast<int32_t>(n);
  }
  if (const json* e = Field(body, "echo"); e && Boolean(*e, "echo")) throw Bad{"'echo' is not supported"};
  if (const json* s = Field(body, "suffix"); s && !(s->is_string() && s->get<std::string>().empty()))
    throw Bad{"'suffix' is not supported"};
  if (const json* b = Field(body, "best_of"); b && Integer(*b, "best_of") != 1) throw Bad{"'best_of' must be 1"};
  if (const json* mt = Field(body, "max_tokens")) r.max_tokens = Integer(*mt, "max_tokens");
}

}  // namespace

std::variant<RequestSpec, HttpError> ParseRequest(const std::string& body_text, Endpoint endpoint,
                                                  const RequestDefaults& defaults, const JsonLimits& limits) {
  json body;
  try {
    body = ParseJsonStrict(body_text, "the body", kExitUsage, limits);
  } catch (const k3::Error& e) {
    return Invalid(e.what());
  }
  if (!body.is_object()) return Invalid("the body must be a JSON object");
  RequestSpec r;
  r.endpoint = endpoint;
  r.sampling = defaults.sampling;
  r.thinking = defaults.thinking;
  r.effort = defaults.effort;
  try {
    const json* model = Field(body, "model");
    if (!model) throw Bad{"'model' is required"};
    if (!model->is_string()) throw Bad{"'model' must be a string"};
    r.model = model->get<std::string>();
    if (endpoint == Endpoint::kChat) ParseChat(body, r);
    else ParseCompletion(body, r);
    if (r.max_tokens && *r.max_tokens < 1) throw Bad{"'max_tokens' must be at least 1"};
    if (const json* n = Field(body, "n"); n && Integer(*n, "n") != 1) throw Bad{"'n' must be 1"};
    ipc::compute::Sampling& s = r.sampling;
    if (const json* v = Field(body, "temperature")) s.temperature = static_cast<float>(Number(*v, "temperature"));
    if (const json* v = Field(body, "top_p")) s.top_p = static_cast<float>(Number(*v, "top_p"));
    if (const json* v = Field(body, "min_p")) s.min_p = static_cast<float>(Number(*v, "min_p"));
    if (const json* v = Field(body, "top_k")) {
      const int64_t k = Integer(*v, "top_k");
      // llama.cpp and vLLM accept -1 for "off"
      if (k < -1 || k > std::numeric_limits<int32_t>::max()) throw Bad{"'top_k' must be -1, 0 (off) or a positive count"};
      s.top_k = k < 0 ? 0 : static_cast<int32_t>(k);
    }
    if (const json* v = Field(body, "presence_penalty")) s.presence_penalty = static_cast<float>(Number(*v, "presence_penalty"));
    if (const json* v = Field(body, "frequency_penalty"))
      s.frequency_penalty = static_cast<float>(Number(*v, "frequency_penalty"));
    if (const json* v = Field(body, "repetition_penalty")) s.repeat_penalty = static_cast<float>(Number(*v, "repetition_penalty"));
    if (const json* v = Field(body, "seed")) {
      const int64_t seed = Integer(*v, "seed");
      if (seed < 0) throw Bad{"'seed' must be a non-negative integer"};
      s.seed = static_cast<uint64_t>(seed);
    } else {
      s.seed = RandomSeed();
    }
    if (const std::string bad = SamplingProblem(s, r.logprobs); !bad.empty()) throw Bad{RequestNames(bad, body)};
    if (const json* st = Field(body, "stop")) {
      if (st->is_string()) r.stop.push_back(st->get<std::string>());
      else if (st->is_array()) {
        for (const json& one : *st) {
          if (!one.is_string()) throw Bad{"'stop' must be a string or an array of strings"};
          r.stop.push_back(one.get<std::string>());
        }
      } else {
        throw Bad{"'stop' must be a string or an array of strings"};
      }
      if (r.stop.size() > 4) throw Bad{"'stop' takes at most 4 strings"};
      for (const std::string& one : r.stop)
        if (one.empty()) throw Bad{"'stop' strings must not be empty"};
    }
    if (const json* v = Field(body, "stream")) r.stream = Boolean(*v, "stream");
    if (const json* so = Field(body, "stream_options")) {
      if (!so->is_object()) throw Bad{"'stream_options' must be an object"};
      if (const json* u = Field(*so, "include_usage")) r.include_usage = Boolean(*u, "include_usage");
    }
    if (const json* v = Field(body, "return_token_ids")) r.return_token_ids = Boolean(*v, "return_token_ids");
    if (const json* v = Field(body, "ignore_eos")) r.ignore_eos = Boolean(*v, "ignore_eos");
    if (const json* v = Field(body, "cache_salt")) {
      if (!v->is_string() || v->get<std::string>().empty() || v->get<std::string>().size() > kMaxCacheSaltBytes)
        throw Bad{"'cache_salt' must be a non-empty string of at most " + std::to_string(kMaxCacheSaltBytes) + " bytes"};
      r.cache_salt = v->get<std::string>();
    }
    if (const json* lb = Field(body, "logit_bias"); lb && !(lb->is_object() && lb->empty()))
      throw Bad{"'logit_bias' is not supported"};
    if (const std::string refused = RefusedField(body); !refused.empty()) throw Bad{refused};
    const OutputFormat format = ParseOutputFormat(body, body_text);  // response_format, guided_json
    if (!format.error.empty()) throw Bad{format.error};
    if ((r.json_schema = format.schema)) {
      if (const std::string bad = ConstrainedRequestConflict(body); !bad.empty()) throw Bad{bad};
      // The constraint is the answer's and a tools channel would bypass it (docs/server.md).
      if (!r.tools_json.empty() && r.tools.choice != ipc::tokenizer::ToolChoice::kNone)
        throw Bad{"'response_format' with 'tools' is not supported (or set 'tool_choice': \"none\")"};
      r.thinking = false;  // the constraint is the answer's: a chat answers at once (docs/server.md)
    }
    if (const json* t = Field(body, "tools"); t && endpoint != Endpoint::kChat && !(t->is_array() && t->empty()))
      throw Bad{"'tools' is not supported on /v1/completions"};
    if (!r.tools_json.empty()) {  // a forced call: its arguments are constrained by its parameters
      const ForcedCallFormat forced = ParseForcedCall(nlohmann::ordered_json::parse(body_text)["tools"], r.tools);
      if (!forced.error.empty()) throw Bad{forced.error};
      if (!forced.name.empty()) {
        if (const std::string bad = ConstrainedRequestConflict(body, "a forced tool call"); !bad.empty()) throw Bad{bad};
        r.forced_call = forced.name;
        r.json_schema = forced.schema;
        r.thinking = false;  // the call comes at once: the template opens it after an empty response
      }
    }
  } catch (const ToolFieldError& b) {
    return Invalid(b.message, "param");
  } catch (const Bad& b) {
    return Invalid(b.message, "param");
  } catch (const json::exception& e) {
    return Invalid(std::string("bad request: ") + e.what());
  }
  return r;
}

}  // namespace k3::server
