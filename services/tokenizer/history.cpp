#include "history.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <sstream>

#include "common/error.h"
#include "common/json_strict.h"
#include "common/user_file.h"
#include "utf8.h"

namespace k3::tok {
namespace {

// A string value: JSON allows \u0000, but the transcript is text that goes through C strings
// and the template.
const std::string& StringValue(const nlohmann::json& val, const std::string& key,
                               const std::function<Error(const std::string&)>& fail) {
  if (!val.is_string()) throw fail("\"" + key + "\" must be a string, not " + val.type_name());
  const std::string& v = val.get_ref<const std::string&>();
  if (v.find('\0') != std::string::npos) throw fail("\"" + key + "\" contains \\u0000");
  return v;
}

// tool_calls: [{"id", "type": "function", "function": {"name", "arguments"}}], OpenAI's shape.
std::vector<ToolCall> ToolCalls(const nlohmann::json& val, const std::function<Error(const std::string&)>& fail) {
  if (!val.is_array()) throw fail("\"tool_calls\" must be an array");
  std::vector<ToolCall> calls;
  for (size_t i = 0; i < val.size(); ++i) {
    const std::string at = "tool_calls[" + std::to_string(i) + "]";
    const nlohmann::json& c = val[i];
    if (!c.is_object()) throw fail(at + " must be an object");
    ToolCall call;
    bool have_function = false;
    for (const auto& [key, v] : c.items()) {
      if (key == "id") call.id = StringValue(v, at + ".id", fail);
      else if (key == "type") {
        if (StringValue(v, at + ".type", fail) != "function") throw fail(at + ".type must be \"function\"");
      } else if (key == "function") {
        if (!v.is_object()) throw fail(at + ".function must be an object");
        have_function = true;
        for (const auto& [fk, fv] : v.items()) {
          if (fk == "name") call.name = StringValue(fv, at + ".function.name", fail);
          else if (fk == "arguments") call.arguments = StringValue(fv, at + ".function.arguments", fail);
          else throw fail("unknown key \"" + Printable(fk) + "\" in " + at + ".function");
        }
      } else {
        throw fail("unknown key \"" + Printable(key) + "\" in " + at);
      }
    }
    if (!have_function || call.name.empty()) throw fail(at + " needs function.name");
    calls.push_back(std::move(call));
  }
  return calls;
}

// One history line through the engine's strict JSON parser (repeated keys, trailing data,
// ill-formed UTF-8 and unpaired surrogates are refused there), then the schema: the known
// keys only, strings except tool_calls.
ChatMessage ParseLine(std::string_view line, const std::string& where) {
  const std::function<Error(const std::string&)> fail = [&](const std::string& what) {
    return BadInput(where + ": " + what);
  };
  if (line.size() > kMaxHistoryLine) throw fail("line longer than 16 MiB");
  const nlohmann::json j = ParseJsonStrict(line, where, kExitBadInput);
  if (!j.is_object()) throw fail("expected an object {\"role\": ..., \"content\": ...}");
  if (j.empty()) throw fail("empty object");
  ChatMessage m{Role::kUser, "", std::nullopt};
  bool have_role = false, have_content = false, have_calls = false;
  for (const auto& [key, val] : j.items()) {
    if (key == "tool_calls") {
      m.tool_calls = ToolCalls(val, fail);
      have_calls = true;
      continue;
    }
    if (key != "role" && key != "content" && key != "reasoning_content" && key != "tool_call_id")
      throw fail("unknown key \"" + Printable(key) + "\"");
    const std::string& v = StringValue(val, key, fail);
    if (key == "role") {
      have_role = true;
      if (v == "system") m.role = Role::kSystem;
      else if (v == "user") m.role = Role::kUser;
      else if (v == "assistant") m.role = Role::kAssistant;
      else if (v == "tool") m.role = Role::kTool;
      else throw fail("unknown role \"" + Printable(v) + "\"");
    } else if (key == "content") {
      have_content = true;
      m.content = v;
    } else if (key == "tool_call_id") {
      m.tool_call_id = v;
    } else {
      m.reasoning_content = v;
    }
  }
  if (!have_role) throw fail("missing key \"role\"");
  if (!have_content) throw fail("missing key \"content\"");
  if (m.reasoning_content && m.role != Role::kAssistant) throw fail("reasoning_content on a non-assistant message");
  if (have_calls && m.role != Role::kAssistant) throw fail("tool_calls on a non-assistant message");
  if (m.tool_call_id && m.role != Role::kTool) throw fail("tool_call_id on a non-tool message");
  if (m.role == Role::kTool && !m.tool_call_id) throw fail("a tool message needs \"tool_call_id\"");
  return m;
}

void AppendJsonString(std::string_view s, std::string* out) {
  static const char kHex[] = "0123456789abcdef";
  *out += '"';
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': *out += "\\\""; break;
      case '\\': *out += "\\\\"; break;
      case '\n': *out += "\\n"; break;
      case '\r': *out += "\\r"; break;
      case '\t': *out += "\\t"; break;
      default:
        if (c < 0x20) {
          *out += "\\u00";
          *out += kHex[c >> 4];
          *out += kHex[c & 15];
        } else {
          *out += ch;
        }
    }
  }
  *out += '"';
}

}  // namespace

ChatMessage ParseHistoryLine(std::string_view line, const std::string& where) {
  return ParseLine(line, where);
}

std::string FormatHistoryLine(const ChatMessage& m) {
  std::string out = "{\"role\":";
  AppendJsonString(RoleName(m.role), &out);
  out += ",\"content\":";
  AppendJsonString(m.content, &out);
  if (m.reasoning_content) {
    out += ",\"reasoning_content\":";
    AppendJsonString(*m.reasoning_content, &out);
  }
  if (!m.tool_calls.empty()) {
    out += ",\"tool_calls\":[";
    for (size_t i = 0; i < m.tool_calls.size(); ++i) {
      const ToolCall& c = m.tool_calls[i];
      out += i ? ",{\"id\":" : "{\"id\":";
      AppendJsonString(c.id, &out);
      out += ",\"type\":\"function\",\"function\":{\"name\":";
      AppendJsonString(c.name, &out);
      out += ",\"arguments\":";
      AppendJsonString(c.arguments, &out);
      out += "}}";
    }
    out += ']';
  }
  if (m.tool_call_id) {
    out += ",\"tool_call_id\":";
    AppendJsonString(*m.tool_call_id, &out);
  }
  out += '}';
  return out;
}

void ValidateConversation(const std::vector<ChatMessage>& msgs, const std::string& path) {
  const ChatMessage* calls = nullptr;  // the assistant message the current run of tool messages answers
  std::vector<std::string> answered;
  for (size_t i = 0; i < msgs.size(); ++i) {
    const std::string where = path + ":" + std::to_string(i + 1) + ": ";
    const ChatMessage& m = msgs[i];
    const Role r = m.role;
    const Role prev = i == 0 ? Role::kSystem : msgs[i - 1].role;  // the start counts as after a system message
    if (r == Role::kSystem && i != 0) throw BadInput(where + "system message only allowed first");
    if (r == Role::kUser && prev == Role::kUser && i != 0)
      throw BadInput(where + "user message must follow an assistant or tool message");
    if (r == Role::kAssistant && (i == 0 || (prev != Role::kUser && prev != Role::kTool)))
      throw BadInput(where + "assistant message must follow a user or tool message");
    if (r == Role::kAssistant) {
      calls = m.tool_calls.empty() ? nullptr : &m;
      answered.clear();
      for (size_t c = 0; c < m.tool_calls.size(); ++c)
        for (size_t d = 0; d < c; ++d)
          if (!m.tool_calls[c].id.empty() && m.tool_calls[c].id == m.tool_calls[d].id)
            throw BadInput(where + "two tool calls have the id \"" + Printable(m.tool_calls[c].id) + "\"");
    }
    if (r == Role::kTool) {
      if (!calls || (prev != Role::kAssistant && prev != Role::kTool))
        throw BadInput(where + "tool message must follow an assistant message with tool_calls");
      if (!m.tool_call_id) throw BadInput(where + "tool message without tool_call_id");
      const std::string& id = *m.tool_call_id;
      bool known = false;
      for (const ToolCall& c : calls->tool_calls) known = known || c.id == id;
      if (!known) throw BadInput(where + "tool_call_id \"" + Printable(id) + "\" names no call of the assistant message before it");
      if (std::find(answered.begin(), answered.end(), id) != answered.end())
        throw BadInput(where + "a second tool message for tool_call_id \"" + Printable(id) + "\"");
      answered.push_back(id);
    }
    if (m.reasoning_content && r != Role::kAssistant)
      throw BadInput(where + "reasoning_content on a non-assistant message");
    if (!m.tool_calls.empty() && r != Role::kAssistant) throw BadInput(where + "tool_calls on a non-assistant message");
    if (m.tool_call_id && r != Role::kTool) throw BadInput(where + "tool_call_id on a non-tool message");
    // Content must survive a write/read round trip.
    auto check_text = [&](const std::string& s, const char* field) {
      if (!IsValidUtf8(s)) throw BadInput(where + field + " is not valid UTF-8");
      if (s.find('\0') != std::string::npos) throw BadInput(where + field + " contains NUL");
    };
    check_text(m.content, "content");
    if (m.reasoning_content) check_text(*m.reasoning_content, "reasoning_content");
    if (m.tool_call_id) check_text(*m.tool_call_id, "tool_call_id");
    for (const ToolCall& c : m.tool_calls) {
      if (c.name.empty()) throw BadInput(where + "a tool call without a function name");
      check_text(c.id, "tool_calls.id");
      check_text(c.name, "tool_calls.function.name");
      check_text(c.arguments, "tool_calls.function.arguments");
    }
  }
}

std::vector<ChatMessage> ReadHistory(const std::string& path, bool missing_ok) {
  struct stat st {};
  if (missing_ok && ::stat(path.c_str(), &st) != 0 && errno == ENOENT) return {};
  const std::string text = ReadUserFile(path, kMaxHistoryFileBytes, "history", kExitBadInput);
  std::vector<ChatMessage> msgs;
  size_t pos = 0, line_no = 0;
  while (pos < text.size()) {
    size_t eol = text.find('\n', pos);
    if (eol == std::string::npos) eol = text.size();
    ++line_no;
    const std::string where = path + ":" + std::to_string(line_no);
    std::string_view line(text.data() + pos, eol - pos);
    pos = eol + 1;
    if (line.empty()) throw BadInput(where + ": blank line");
    msgs.push_back(ParseHistoryLine(line, where));
  }
  ValidateConversation(msgs, path);
  return msgs;
}

void WriteHistory(const std::string& path, const std::vector<ChatMessage>& msgs) {
  ValidateConversation(msgs, path);
  std::string text;
  for (const auto& m : msgs) {
    text += FormatHistoryLine(m);
    text += '\n';
  }
  WriteFileAtomically(path, text, "history", kExitRuntime);
}

}  // namespace k3::tok
