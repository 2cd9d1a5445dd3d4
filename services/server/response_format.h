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
std::string ConstrainedRequestConflict(const nlohmann::json& body);

}  // namespace k3::server
