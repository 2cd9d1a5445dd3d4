// JSON Schema (the subset OpenAI's structured outputs document) -> a grammar of nodes that the
// byte matcher (matcher.h) walks. What is outside the subset is refused with a SchemaError that
// names the keyword and where it is, so k3-server can answer 400 before any work.
//
// Supported: type (a name or a list of names), properties, required, additionalProperties
// (false, or absent: only the declared properties are produced), items, minItems, maxItems,
// enum, const, anyOf, $ref to "#" or a JSON pointer inside the document ($defs, definitions;
// recursion allowed, output nesting bounded by kMaxDepth), format "uuid"; the annotations
// title, description, $schema, $id, $comment, default, examples. An object without
// "properties" takes any keys with any values (json_object).
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace k3::json_constraint {

struct SchemaError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

enum class Kind : uint8_t { kObject, kArray, kString, kNumber, kInteger, kLiterals, kAnyOf };
enum class Format : uint8_t { kNone, kUuid };

struct Property {
  std::string key;  // its JSON text with the colon: "\"name\":"
  int32_t node = -1;
  bool required = false;
};

struct Node {
  Kind kind = Kind::kLiterals;
  // kObject. Properties are produced in the schema's order (each optional one may be skipped).
  bool free_keys = false;              // no "properties": any keys, values of any type
  std::vector<Property> props;
  std::vector<int32_t> next_required;  // [k]: the first required property at index >= k, or props.size()
  // kArray
  int32_t items = -1;
  int64_t min_items = 0, max_items = -1;  // -1: no bound
  // kLiterals: compact JSON texts, sorted, distinct (enum, const, true/false/null)
  std::vector<std::string> literals;
  // kAnyOf: the alternatives; `leaves` the non-anyOf nodes they stand for
  std::vector<int32_t> alts, leaves;
  Format format = Format::kNone;  // kString
};

struct Grammar {
  std::vector<Node> nodes;
  int32_t root = -1;
  int32_t any = -1;         // any JSON value (free objects' values, arrays without items)
  int32_t key_string = -1;  // a free object's keys
};

// Objects and arrays nest at most this deep in the output (recursive $ref is cut there).
inline constexpr int kMaxDepth = 32;

// Throws SchemaError("'pattern' is not supported (at /properties/a)") and the like.
Grammar CompileSchema(const nlohmann::ordered_json& schema);

// The nodes a value of `node` may start as: itself, or an anyOf's leaves.
const std::vector<int32_t>& Leaves(const Grammar& g, int32_t node, std::vector<int32_t>& scratch);

}  // namespace k3::json_constraint
