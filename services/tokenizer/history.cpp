#include "history.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "common/error.h"
#include "common/json_strict.h"
#include "common/user_file.h"
#include "utf8.h"

namespace k3::tok {
namespace {

// One history line through the engine's strict JSON parser (repeated keys, trailing data,
// ill-formed UTF-8 and unpaired surrogates are refused there), then the schema: an object of
// string values under the three known keys.
ChatMessage ParseLine(std::string_view line, const std::string& where) {
  auto fail = [&](const std::string& what) { return BadInput(where + ": " + what); };
  if (line.size() > kMaxHistoryLine) throw fail("line longer than 16 MiB");
  const nlohmann::json j = ParseJsonStrict(line, where, kExitBadInput);
  if (!j.is_object()) throw fail("expected an object {\"role\": ..., \"content\": ...}");
  if (j.empty()) throw fail("empty object");
  ChatMessage m{Role::kUser, "", std::nullopt};
  bool have_role = false, have_content = false;
  for (const auto& [key, val] : j.items()) {
    if (key != "role" && key != "content" && key != "reasoning_content")
      throw fail("unknown key \"" + Printable(key) + "\"");
    if (!val.is_string()) throw fail("\"" + key + "\" must be a string, not " + val.type_name());
    const std::string& v = val.get_ref<const std::string&>();
    // JSON allows \u0000; the transcript is text that goes through C strings and the template.
    if (v.find('\0') != std::string::npos) throw fail("\"" + key + "\" contains \\u0000");
    if (key == "role") {
      have_role = true;
      if (v == "system") m.role = Role::kSystem;
      else if (v == "user") m.role = Role::kUser;
      else if (v == "assistant") m.role = Role::kAssistant;
      else throw fail("unknown role \"" + Printable(v) + "\"");
    } else if (key == "content") {
      have_content = true;
      m.content = v;
    } else {
      m.reasoning_content = v;
    }
  }
  if (!have_role) throw fail("missing key \"role\"");
  if (!have_content) throw fail("missing key \"content\"");
  if (m.reasoning_content && m.role != Role::kAssistant) throw fail("reasoning_content on a non-assistant message");
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
  out += '}';
  return out;
}

void ValidateConversation(const std::vector<ChatMessage>& msgs, const std::string& path) {
  for (size_t i = 0; i < msgs.size(); ++i) {
    const std::string where = path + ":" + std::to_string(i + 1) + ": ";
    const Role r = msgs[i].role;
    if (r == Role::kSystem && i != 0) throw BadInput(where + "system message only allowed first");
    const bool after_system_or_start = i == 0 || msgs[i - 1].role == Role::kSystem;
    if (r == Role::kUser && !after_system_or_start && msgs[i - 1].role != Role::kAssistant)
      throw BadInput(where + "user message must follow an assistant message");
    if (r == Role::kAssistant && (i == 0 || msgs[i - 1].role != Role::kUser))
      throw BadInput(where + "assistant message must follow a user message");
    if (msgs[i].reasoning_content && r != Role::kAssistant)
      throw BadInput(where + "reasoning_content on a non-assistant message");
    // Content must survive a write/read round trip.
    auto check_text = [&](const std::string& s, const char* field) {
      if (!IsValidUtf8(s)) throw BadInput(where + field + " is not valid UTF-8");
      if (s.find('\0') != std::string::npos) throw BadInput(where + field + " contains NUL");
    };
    check_text(msgs[i].content, "content");
    if (msgs[i].reasoning_content) check_text(*msgs[i].reasoning_content, "reasoning_content");
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
