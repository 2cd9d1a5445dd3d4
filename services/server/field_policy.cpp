#include "services/server/field_policy.h"

#include <functional>
#include <vector>

namespace k3::server {
namespace {
using nlohmann::json;

struct Rule {
  const char* field;
  std::function<bool(const json&)> harmless;  // the values that ask for nothing (k3's behaviour)
  const char* why;
};

bool Never(const json&) { return false; }
bool False(const json& v) { return v.is_boolean() && !v.get<bool>(); }
bool True(const json& v) { return v.is_boolean() && v.get<bool>(); }
bool Empty(const json& v) { return (v.is_object() || v.is_array()) && v.empty(); }
bool Zero(const json& v) { return v.is_number() && v.get<double>() == 0; }

const std::vector<Rule>& Rules() {
  static const std::vector<Rule> rules = {
      // OpenAI
      {"functions", Empty, "legacy function calling; use 'tools'"},
      {"function_call", Never, "legacy function calling; use 'tool_choice'"},
      {"audio", Never, "k3 produces text only"},
      {"modalities", [](const json& v) { return v == json::array({"text"}); }, "k3 produces text only"},
      {"prediction", Never, "predicted outputs are not supported"},
      {"web_search_options", Never, "k3 has no web search"},
      {"store", False, "k3 stores no completions"},
      {"service_tier", [](const json& v) { return v == "auto" || v == "default"; }, "k3 has one service tier"},
      // vLLM
      {"guided_regex", Never, "regular-expression constraints are not supported; use 'response_format'"},
      {"guided_choice", Never, "choice constraints are not supported; use 'response_format' with an enum"},
      {"guided_grammar", Never, "grammar constraints are not supported; use 'response_format'"},
      {"guided_decoding_backend", Never, "k3 has one constraint engine"},
      {"guided_whitespace_pattern", Never, "constrained output is compact JSON"},
      {"structured_outputs", Never, "use 'response_format'"},
      {"grammar", Never, "grammar constraints are not supported; use 'response_format'"},
      {"json_schema", Never, "use 'response_format' {\"type\": \"json_schema\", ...}"},
      {"prompt_logprobs", Never, "prompt logprobs are not supported"},
      {"min_tokens", Zero, "a minimum length is not supported"},
      {"stop_token_ids", Empty, "extra stop ids are not supported; use 'stop'"},
      {"bad_words", Empty, "banned words are not supported"},
      {"allowed_token_ids", Never, "an id allow-list is not supported"},
      {"use_beam_search", False, "beam search is not supported"},
      {"length_penalty", [](const json& v) { return v.is_number() && v.get<double>() == 1; }, "beam search is not supported"},
      {"include_stop_str_in_output", False, "the answer ends before a stop string"},
      {"skip_special_tokens", True, "special tokens are never part of the answer"},
      {"truncate_prompt_tokens", Never, "prompt truncation is not supported"},
      {"chat_template", Never, "k3 renders K3's own chat template"},
      {"documents", Never, "documents are not supported"},
      {"priority", Zero, "requests are served in arrival order"},
      {"logits_processors", Never, "logits processors are not supported"},
  };
  return rules;
}

}  // namespace

std::string RefusedField(const json& body) {
  for (const Rule& r : Rules()) {
    const auto it = body.find(r.field);
    if (it == body.end() || it->is_null() || r.harmless(*it)) continue;
    return std::string("'") + r.field + "' is not supported (" + r.why + ")";
  }
  return "";
}

}  // namespace k3::server
