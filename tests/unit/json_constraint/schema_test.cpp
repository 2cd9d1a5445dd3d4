// The schema subset: what compiles, and the refusals naming the keyword (docs/server.md).
#include <gtest/gtest.h>

#include "common/json_constraint/constraint.h"

namespace k3::json_constraint {
namespace {

std::string Refusal(const std::string& schema) {
  try {
    CompileSchemaText(schema);
  } catch (const SchemaError& e) {
    return e.what();
  }
  return "";
}

TEST(Schema, CompilesTheStructuredOutputsSubset) {
  EXPECT_EQ(Refusal(R"({"type":"object","properties":{"a":{"type":["string","null"]},"b":{"enum":["x",1,null]},
    "c":{"type":"array","items":{"$ref":"#/$defs/p"},"minItems":1,"maxItems":3},"d":{"anyOf":[{"type":"integer"},{"const":"n/a"}]},
    "e":{"type":"string","format":"uuid","description":"an id"}},"required":["a","c"],"additionalProperties":false,
    "$defs":{"p":{"type":"object","properties":{"x":{"type":"number"}},"required":["x"],"additionalProperties":false}}})"),
            "");
  EXPECT_EQ(Refusal(R"({"type":"object"})"), "");  // json_object
  EXPECT_EQ(Refusal(R"({"type":"object","properties":{"next":{"anyOf":[{"$ref":"#"},{"type":"null"}]}},"required":["next"]})"), "");
}

TEST(Schema, RefusesWhatItDoesNotSupportNamingTheKeyword) {
  EXPECT_EQ(Refusal(R"({"type":"string","pattern":"^a"})"), "'pattern' is not supported (at /)");
  EXPECT_EQ(Refusal(R"({"type":"object","properties":{"a":{"type":"integer","minimum":3}}})"),
            "'minimum' is not supported (at /properties/a)");
  EXPECT_EQ(Refusal(R"({"oneOf":[{"type":"string"}]})"), "'oneOf' is not supported (at /)");
  EXPECT_EQ(Refusal(R"({"type":"object","additionalProperties":true})"),
            "'additionalProperties' other than false is not supported (at /)");
  EXPECT_EQ(Refusal(R"({"type":"string","format":"date"})"), "'format' \"date\" is not supported (uuid is) (at /)");
  EXPECT_EQ(Refusal(R"({"type":"object","properties":{},"required":["x"]})"),
            "'required' names \"x\", which is not in 'properties' (at /)");
  EXPECT_EQ(Refusal(R"({"type":"array","minItems":3,"maxItems":2})"), "'maxItems' is below 'minItems' (at /)");
  EXPECT_EQ(Refusal(R"({"type":"string","items":{}})"), "'items' needs type array (at /)");
  EXPECT_EQ(Refusal(R"({"type":"strin"})"), "'type' \"strin\" is not a JSON Schema type (at /)");
  EXPECT_EQ(Refusal(R"({"$ref":"#/$defs/none"})"), "'$ref' \"#/$defs/none\" points to nothing");
  EXPECT_EQ(Refusal(R"({"$ref":"http://example.com/s.json"})"), "'$ref' must be \"#\" or \"#/...\" inside the schema (at /)");
  EXPECT_EQ(Refusal(R"({"anyOf":[{"$ref":"#"}]})"), "'anyOf' refers to itself without a value in between");
  EXPECT_EQ(Refusal(R"({"type":"integer","enum":[1,"a"]})"), "'enum' value \"a\" is not of the schema's type (at /)");
  EXPECT_EQ(Refusal("{\"type\":").rfind("the schema is not JSON: ", 0), 0u);
}

TEST(Schema, KeepsThePropertiesInTheDocumentsOrder) {
  const Grammar g = CompileSchemaText(R"({"type":"object","properties":{"zeta":{},"alpha":{},"mid":{}}})");
  const Node& root = g.nodes[static_cast<size_t>(g.root)];
  ASSERT_EQ(root.props.size(), 3u);
  EXPECT_EQ(root.props[0].key, "\"zeta\":");
  EXPECT_EQ(root.props[1].key, "\"alpha\":");
  EXPECT_EQ(root.props[2].key, "\"mid\":");
}

}  // namespace
}  // namespace k3::json_constraint
