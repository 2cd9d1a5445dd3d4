// A request's output format: response_format ({"type": "text" | "json_object" | "json_schema"})
// or vLLM's guided_json, as the JSON Schema text compute constrains the answer with
// (docs/server.md "Structured output"). The schema is compiled here too, so what the subset
// lacks is a 400 naming the keyword before any work.
#pragma once
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace k3::server {

struct OutputFormat {
  std::optional<std::string> schema;  // compact JSON text, properties in the request's order; nullopt: free text
  std::string error;                  // non-empty: the 400 message
};

// `body` the parsed request, `body_text` its text (re-read in document order when a format is given).
OutputFormat ParseOutputFormat(const nlohmann::json& body, const std::string& body_text);

// Why the other fields of a constrained request contradict it ("" when they do not): a stop
// string or ignore_eos would cut or run past the value, and a chat's thinking must be off.
// `what` names the constraint in the message.
std::string ConstrainedRequestConflict(const nlohmann::json& body, const std::string& what = "a constrained 'response_format'");

// What `strict: true` asks of a schema, as OpenAI's structured outputs define it (docs/server.md
// "Structured output"): an object at the root (not anyOf), and in every object
// `additionalProperties: false` and every property in `required`. "" when it holds, else the
// 400 message naming the keyword and where (`where`: the field, e.g. response_format.json_schema.schema).
std::string StrictRefusal(const nlohmann::ordered_json& schema, const std::string& where);

// A forced call's constraint (docs/server.md "Tool calls"): with tool_choice naming a function,
// or `required` with one function declared, that function's name and its `parameters` as the
// schema text the arguments are constrained by. `tools` is the request's array as sent. name
// empty: no call constrained; error non-empty: the 400 message (a `parameters` outside the
// subset, a function.strict that cannot be kept).
struct ForcedCallFormat {
  std::string name, schema, error;
};
struct ToolRules;
ForcedCallFormat ParseForcedCall(const nlohmann::ordered_json& tools, const ToolRules& rules);

}  // namespace k3::server
