#include "tool_template.h"

#include <nlohmann/json.hpp>

#include "common/error.h"

namespace k3::tok {
namespace {
using ojson = nlohmann::ordered_json;

// The texts, as the released encoder (encoding_k3.py, through the ports docs/chat.md cites) writes them.
constexpr const char* kDeclareHead = "# Tools\nHere are the available tools, described in JSONSchema.\n\n```json\n";
constexpr const char* kDeclareTail = "\n```";
constexpr const char* kChoiceRequired =
    "The system is invoked with `tool_choice=required`.\nYou MUST call tools in the next message.";
constexpr const char* kChoiceNone =
    "The system is invoked with `tool_choice=none`.\nYou MUST NOT call any tools in the next message.";

void Text(std::string s, Segments* out) {
  if (!s.empty()) out->push_back({false, std::move(s)});  // the encoder skips empty segments
}
void Control(std::string s, Segments* out) { out->push_back({true, std::move(s)}); }

}  // namespace

std::string EscapeAttr(std::string_view v) {
  std::string out;
  for (char c : v) {
    if (c == '&') out += "&amp;";
    else if (c == '"') out += "&quot;";
    else out += c;
  }
  return out;
}

void OpenTag(std::string_view tag, const Attrs& attrs, Segments* out) {
  Control("<|open|>", out);
  Text(std::string(tag), out);
  for (const auto& [key, value] : attrs) {
    Text(" " + key, out);
    Text("=\"", out);
    Text(EscapeAttr(value), out);
    Text("\"", out);
  }
  Control("<|sep|>", out);
}

void CloseTag(std::string_view tag, Segments* out) {
  Control("<|close|>", out);
  Text(std::string(tag), out);
  Control("<|sep|>", out);
}

void Message(const Attrs& attrs, const std::string& body, Segments* out) {
  OpenTag("message", attrs, out);
  Text(body, out);
  CloseTag("message", out);
  Control("<|end_of_msg|>", out);
}

Segments ToolDeclaration(const std::string& tools_json) {
  nlohmann::json tools;  // std::map objects: every key sorted, as the encoder's deep sort
  try {
    tools = nlohmann::json::parse(tools_json);
  } catch (const nlohmann::json::exception& e) {
    throw BadInput(std::string("tools: not JSON: ") + e.what());
  }
  if (!tools.is_array()) throw BadInput("tools: not a JSON array");
  Segments out;
  Message({{"role", "system"}, {"type", "tool-declare"}}, kDeclareHead + tools.dump() + kDeclareTail, &out);
  return out;
}

namespace {

const char* ArgumentType(const ojson& v) {
  if (v.is_boolean()) return "boolean";
  if (v.is_null()) return "null";
  if (v.is_number()) return "number";
  if (v.is_string()) return "string";
  if (v.is_object()) return "object";
  return "array";
}

std::string ArgumentValueText(const ojson& v) {
  if (v.is_object()) {
    std::string s = "{";
    bool first = true;
    for (const auto& [k, x] : v.items()) {
      s += (first ? "" : ", ") + ojson(k).dump() + ": " + ArgumentValueText(x);
      first = false;
    }
    return s + "}";
  }
  if (v.is_array()) {
    std::string s = "[";
    for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + ArgumentValueText(v[i]);
    return s + "]";
  }
  return v.dump();
}

}  // namespace

Segments ForcedCallOpening(const std::string& name) {
  Segments out;
  OpenTag("tools", {}, &out);
  OpenTag("call", {{"tool", name}, {"index", "1"}}, &out);
  OpenTag("json", {{"type", "object"}}, &out);
  return out;
}

Segments ToolsChannel(const std::vector<ToolCall>& calls) {
  Segments out;
  OpenTag("tools", {}, &out);
  for (size_t i = 0; i < calls.size(); ++i) {
    const ToolCall& c = calls[i];
    OpenTag("call", {{"tool", c.name}, {"index", std::to_string(i + 1)}}, &out);
    ojson args = ojson::object();
    bool parsed = true;
    if (c.arguments.find_first_not_of(" \t\r\n") != std::string::npos) {
      try {
        args = ojson::parse(c.arguments);
      } catch (const ojson::exception&) {
        parsed = false;
      }
    }
    if (!parsed) {
      OpenTag("json", {{"type", "object"}}, &out);
      Text(c.arguments, &out);
      CloseTag("json", &out);
    } else if (!args.is_object()) {
      throw BadInput("tool call " + std::to_string(i + 1) + " (" + c.name + "): arguments must be a JSON object");
    } else {
      for (const auto& [key, value] : args.items()) {
        OpenTag("argument", {{"key", key}, {"type", ArgumentType(value)}}, &out);
        Text(value.is_string() ? value.get<std::string>() : ArgumentValueText(value), &out);
        CloseTag("argument", &out);
      }
    }
    CloseTag("call", &out);
  }
  CloseTag("tools", &out);
  return out;
}

Segments ToolChoiceMessage(ToolChoice choice) {
  Segments out;
  // The encoder knows `required` and `none` only; a named function is rendered as `required`
  // (docs/chat.md says why), the server then accepts only calls of that function.
  if (choice == ToolChoice::kRequired || choice == ToolChoice::kNamed)
    Message({{"role", "system"}, {"type", "tool-choice"}}, kChoiceRequired, &out);
  else if (choice == ToolChoice::kNone)
    Message({{"role", "system"}, {"type", "tool-choice"}}, kChoiceNone, &out);
  return out;
}

}  // namespace k3::tok
