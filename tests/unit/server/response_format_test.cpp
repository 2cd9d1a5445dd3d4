// response_format / guided_json and the field policy, through ParseRequest: what a constrained
// request becomes (the schema text compute gets, thinking off) and its 400s. Expected values
// are docs/server.md ("Structured output", "Field policy") and OpenAI's API reference.
#include <gtest/gtest.h>

#include <string>
#include <variant>

#include "services/server/openai_request.h"

namespace k3::server {
namespace {

std::variant<RequestSpec, HttpError> Chat(const std::string& fields) {
  RequestDefaults d;
  d.thinking = true;
  return ParseRequest(R"({"model": "m", "messages": [{"role": "user", "content": "hi"}], )" + fields + "}",
                      Endpoint::kChat, d);
}
std::string Error(const std::string& fields) {
  const auto r = Chat(fields);
  if (const auto* e = std::get_if<HttpError>(&r)) return std::to_string(e->status) + " " + e->message;
  return "accepted";
}
RequestSpec Spec(const std::string& fields) {
  const auto r = Chat(fields);
  if (const auto* e = std::get_if<HttpError>(&r)) ADD_FAILURE() << fields << " -> " << e->message;
  return std::holds_alternative<RequestSpec>(r) ? std::get<RequestSpec>(r) : RequestSpec{};
}

TEST(ResponseFormat, JsonSchemaKeepsTheDocumentsOrderAndTurnsThinkingOff) {
  const RequestSpec r = Spec(R"("response_format": {"type": "json_schema", "json_schema": {"name": "p", "strict": true,
      "schema": {"type": "object", "properties": {"z": {"type": "string"}, "a": {"type": "integer"}}, "required": ["z", "a"],
      "additionalProperties": false}}})");
  ASSERT_TRUE(r.json_schema.has_value());
  EXPECT_EQ(*r.json_schema, R"({"type":"object","properties":{"z":{"type":"string"},"a":{"type":"integer"}},"required":["z","a"],"additionalProperties":false})");
  EXPECT_FALSE(r.thinking);
}

TEST(ResponseFormat, JsonObjectTextAndGuidedJson) {
  EXPECT_EQ(*Spec(R"("response_format": {"type": "json_object"})").json_schema, R"({"type":"object"})");
  EXPECT_FALSE(Spec(R"("response_format": {"type": "text"})").json_schema.has_value());
  EXPECT_TRUE(Spec(R"("response_format": {"type": "text"})").thinking);
  EXPECT_EQ(*Spec(R"("guided_json": {"type": "array", "items": {"type": "integer"}})").json_schema, R"({"type":"array","items":{"type":"integer"}})");
  EXPECT_EQ(*Spec(R"("guided_json": "{\"enum\": [1, 2]}")").json_schema, R"({"enum":[1,2]})");
  EXPECT_EQ(*Spec(R"("response_format": {"type": "json_object"}, "reasoning_effort": "none")").json_schema, R"({"type":"object"})");
}

TEST(ResponseFormat, RefusalsNameTheField) {
  EXPECT_EQ(Error(R"("response_format": {"type": "json_schema", "json_schema": {"name": "p", "schema": {"type": "string", "minLength": 2}}})"),
            "400 'response_format.json_schema.schema': 'minLength' is not supported (at /)");
  EXPECT_EQ(Error(R"("response_format": {"type": "json_schema", "json_schema": {"schema": {}}})"),
            "400 'response_format.json_schema.name' must be a string of 1 to 64 characters");
  EXPECT_EQ(Error(R"("response_format": {"type": "json_schema", "json_schema": {"name": "p"}})"),
            "400 'response_format.json_schema.schema' must be an object");
  EXPECT_EQ(Error(R"("response_format": {"type": "json_schema", "json_schema": {"name": "p", "schema": {}, "strict": "yes"}})"),
            "400 'response_format.json_schema.strict' must be true or false");
  EXPECT_EQ(Error(R"("response_format": {"type": "json_object", "schema": {}})"), "400 'response_format.schema' is not supported");
  EXPECT_EQ(Error(R"("response_format": "json")"), "400 'response_format' must be an object");
  EXPECT_EQ(Error(R"("guided_json": {"oneOf": []})"), "400 'guided_json': 'oneOf' is not supported (at /)");
  EXPECT_EQ(Error(R"("guided_json": "{no")"), "400 'guided_json' must be a schema object or its JSON text");
  // Every body is parsed strictly (json_strict.h): a repeated key is 400 before the schema is read.
  EXPECT_EQ(Error(R"("guided_json": {"type": "object", "type": "array"})"), "400 the body: duplicate key \"type\"");
  EXPECT_EQ(Error(R"("guided_json": {}, "response_format": {"type": "json_object"})"),
            "400 'guided_json' and a 'response_format' other than text exclude each other");
  EXPECT_EQ(Error(R"("response_format": {"type": "json_object"}, "stop": ["}"])"),
            "400 'stop' cannot be combined with a constrained 'response_format' (a stop string could cut the value)");
  EXPECT_EQ(Error(R"("response_format": {"type": "json_object"}, "ignore_eos": true)"),
            "400 'ignore_eos' cannot be combined with a constrained 'response_format'");
  EXPECT_EQ(Error(R"("response_format": {"type": "json_object"}, "reasoning_effort": "high")"),
            "400 a constrained 'response_format' turns thinking off: 'reasoning_effort' must be none or absent");
  EXPECT_EQ(Error(R"("response_format": {"type": "json_object"}, "chat_template_kwargs": {"thinking": true})"),
            "400 a constrained 'response_format' turns thinking off: 'chat_template_kwargs.thinking' must not be true");
}

TEST(FieldPolicy, RefusedUnlessTheValueAsksForNothing) {
  for (const char* f : {R"("functions": [{"name": "f"}])", R"("function_call": "auto")", R"("guided_regex": "a")",
                        R"("guided_choice": ["a"])", R"("guided_grammar": "g")", R"("grammar": "g")", R"("prompt_logprobs": 1)",
                        R"("min_tokens": 3)", R"("store": true)", R"("service_tier": "flex")", R"("modalities": ["text", "audio"])",
                        R"("use_beam_search": true)", R"("skip_special_tokens": false)", R"("json_schema": {})"}) {
    const std::string e = Error(f);
    const std::string name = std::string(f).substr(1, std::string(f).find('"', 1) - 1);
    EXPECT_EQ(e.rfind("400 '" + name + "' is not supported (", 0), 0u) << f << " -> " << e;
  }
  EXPECT_EQ(Error(R"("functions": [], "store": false, "service_tier": "auto", "modalities": ["text"], "min_tokens": 0,
      "skip_special_tokens": true, "use_beam_search": false, "user": "u", "metadata": {"k": "v"})"), "accepted");
}

// strict: true is OpenAI's strict subset (its structured-outputs guide, "Supported schemas"): an
// object at the root, additionalProperties false and every property required, in every object.
TEST(ResponseFormat, StrictTrueNeedsTheStrictSubset) {
  auto rf = [](const std::string& schema, const char* strict) {
    return std::string(R"("response_format": {"type": "json_schema", "json_schema": {"name": "p", "strict": )") + strict +
           R"(, "schema": )" + schema + "}}";
  };
  const std::string open = R"({"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]})";
  EXPECT_EQ(Error(rf(open, "true")),
            "400 'response_format.json_schema.schema': strict: true needs 'additionalProperties': false in every object (at the root)");
  EXPECT_EQ(Error(rf(open, "false")), "accepted");  // constrained all the same (docs/server.md)
  EXPECT_EQ(Error(rf(R"({"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "object",
      "properties": {"c": {"type": "integer"}}, "required": [], "additionalProperties": false}}, "required": ["a", "b"],
      "additionalProperties": false})", "true")),
            "400 'response_format.json_schema.schema': strict: true needs every property in 'required' ('c' at /properties/b is not)");
  EXPECT_EQ(Error(rf(R"({"type": "array", "items": {"type": "integer"}})", "true")),
            "400 'response_format.json_schema.schema': strict: true needs an object schema at the root (not anyOf)");
}

// A forced call (tool_choice naming a function, or required with one declared) is constrained by
// the function's parameters; its strict: true is the same subset; strict elsewhere is refused.
TEST(ResponseFormat, ForcedCallIsConstrainedByItsParameters) {
  const std::string params = R"({"type": "object", "properties": {"z": {"enum": ["x"]}, "a": {"type": "integer"}},
      "required": ["z", "a"], "additionalProperties": false})";
  auto tool = [&](const std::string& name, const char* strict, const std::string& p) {
    return R"({"type": "function", "function": {"name": ")" + name + R"(", "strict": )" + strict + R"(, "parameters": )" + p + "}}";
  };
  RequestSpec r = Spec(R"("tools": [)" + tool("f", "true", params) + "," + tool("g", "false", "{}") +
                       R"(], "tool_choice": {"type": "function", "function": {"name": "f"}})");
  EXPECT_EQ(r.forced_call, "f");
  ASSERT_TRUE(r.json_schema.has_value());
  EXPECT_EQ(*r.json_schema, R"({"type":"object","properties":{"z":{"enum":["x"]},"a":{"type":"integer"}},"required":["z","a"],"additionalProperties":false})");
  EXPECT_FALSE(r.thinking);
  r = Spec(R"("tools": [)" + tool("f", "false", params) + R"(], "tool_choice": "required")");
  EXPECT_EQ(r.forced_call, "f");
  r = Spec(R"("tools": [)" + tool("f", "false", params) + "," + tool("g", "false", "{}") + R"(], "tool_choice": "required")");
  EXPECT_EQ(r.forced_call, "");  // two functions: the name comes before the arguments, not constrained
  EXPECT_FALSE(r.json_schema.has_value());
  EXPECT_TRUE(r.thinking);
  EXPECT_EQ(Error(R"("tools": [)" + tool("f", "true", params) + "]"),
            "400 'tools[0].function.strict': true needs this function's call forced ('tool_choice' naming it, or \"required\" "
            "with it the only tool): k3 constrains a forced call's arguments only");
  EXPECT_EQ(Error(R"("tools": [)" + tool("f", "true", R"({"type": "object", "properties": {"a": {"type": "string"}}})") +
                  R"(], "tool_choice": "required")"),
            "400 'tools[0].function.parameters': strict: true needs 'additionalProperties': false in every object (at the root)");
  EXPECT_EQ(Error(R"("tools": [)" + tool("f", "false", R"({"type": "object", "properties": {"a": {"type": "string", "pattern": "x"}}})") +
                  R"(], "tool_choice": "required")"),
            "400 'tools[0].function.parameters': 'pattern' is not supported (at /properties/a)");
  EXPECT_EQ(Error(R"("tools": [)" + tool("f", "false", params) + R"(], "tool_choice": "required", "stop": ["}"])"),
            "400 'stop' cannot be combined with a forced tool call (a stop string could cut the value)");
}

}  // namespace
}  // namespace k3::server
