// The model's tools channel -> OpenAI tool_calls (docs/server.md "Tool calls"): pure functions
// from the generated ids to calls and to the calls that could not be accepted.
//
// The channel, as K3's template writes it (docs/chat.md "Tool calls"), after <|open|>tools<|sep|>:
//   (<|open|>call tool="NAME" index="I"<|sep|> ARGS <|close|>call<|sep|>)* <|close|>tools<|sep|>
//   ARGS: (<|open|>argument key="K" type="T"<|sep|> VALUE <|close|>argument<|sep|>)*
//         or one <|open|>json type="object"<|sep|> JSON <|close|>json<|sep|>
// Structure is only ever the control ids: text that spells "<|open|>" is text.
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/chat_format.h"
#include "services/server/tool_types.h"

namespace k3::server {

// A control token of the template, or a run of text (the bytes of consecutive other ids).
struct XtmlPiece {
  enum class Kind { kText, kOpen, kClose, kSep };
  Kind kind = Kind::kText;
  std::string text;  // kText only
  bool operator==(const XtmlPiece&) const = default;
};
std::vector<XtmlPiece> XtmlPieces(const std::vector<int32_t>& ids, const ChatControlIds& c,
                                  const std::function<const std::string&(int32_t)>& bytes);
// The pieces as text, control tokens spelled out: what a call that was not accepted shows as.
std::string XtmlText(const std::vector<XtmlPiece>& pieces, size_t from, size_t to);

struct ParsedCall {
  std::string name;
  // function.arguments (a JSON object, compact) in the pieces a stream sends: "{" and the first
  // argument, then ",KEY:VALUE" per argument, then "}" ("{}" alone without arguments).
  std::vector<std::string> fragments;
  std::string Arguments() const;
};
struct ToolCallsParse {
  std::vector<ParsedCall> calls;       // accepted, in order
  std::vector<CallProblem> problems;   // calls (and stray pieces) not accepted, in order
  bool closed = false;                 // <|close|>tools<|sep|> seen
};

// `body`: the channel's pieces after its <|open|>tools<|sep|>. With `final` false (the reply
// goes on) a call not closed yet is left for a later call with more pieces; with `final` true
// it is a problem. Calls are checked against `rules` (declared, the choice, parallel).
ToolCallsParse ParseToolCalls(const std::vector<XtmlPiece>& body, const ToolRules& rules, bool final);

// The calls a forced reply (tool_choice `required` or a named function) may make: the functions
// it may name, each with the JSON schema its arguments must satisfy (`parameters`, in the
// request's key order; {"type": "object", "properties": {}} when absent). Empty when no call is
// forced. `tools` is the request's `tools` array as sent (forced_call.h constrains with it).
struct ForcedCall {
  std::string name;
  nlohmann::ordered_json parameters;
  size_t index = 0;     // in `tools`
  bool strict = false;  // function.strict
};
std::vector<ForcedCall> ForcedCallSchemas(const nlohmann::ordered_json& tools, const ToolRules& rules);

}  // namespace k3::server
