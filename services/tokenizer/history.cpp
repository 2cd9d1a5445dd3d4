#include "history.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "../../common/error.h"
#include "utf8.h"

namespace k3::tok {
namespace {

// A minimal strict JSON reader for {"key": "string", ...}: nlohmann silently keeps the last
// of duplicate keys and accepts \u0000, which this format must reject.
class LineParser {
 public:
  LineParser(std::string_view s, const std::string& where) : s_(s), where_(where) {}

  ChatMessage Parse() {
    if (s_.size() > kMaxHistoryLine) Fail("line longer than 16 MiB");
    if (!IsValidUtf8(s_)) Fail("not valid UTF-8");
    for (char ch : s_)
      if (static_cast<unsigned char>(ch) < 0x20 && ch != ' ' && ch != '\t') Fail("raw control byte");
    bool have_role = false, have_content = false, have_reasoning = false;
    ChatMessage m{Role::kUser, "", std::nullopt};
    Ws();
    Expect('{');
    Ws();
    if (Peek() == '}') Fail("empty object");
    for (;;) {
      Ws();
      const std::string key = String();
      Ws();
      Expect(':');
      Ws();
      if (key == "role") {
        if (have_role) Fail("duplicate key \"role\"");
        have_role = true;
        const std::string r = String();
        if (r == "system") m.role = Role::kSystem;
        else if (r == "user") m.role = Role::kUser;
        else if (r == "assistant") m.role = Role::kAssistant;
        else Fail("unknown role \"" + r + "\"");
      } else if (key == "content") {
        if (have_content) Fail("duplicate key \"content\"");
        have_content = true;
        m.content = String();
      } else if (key == "reasoning_content") {
        if (have_reasoning) Fail("duplicate key \"reasoning_content\"");
        have_reasoning = true;
        m.reasoning_content = String();
      } else {
        Fail("unknown key \"" + key + "\"");
      }
      Ws();
      if (Peek() == ',') {
        ++p_;
        continue;
      }
      Expect('}');
      break;
    }
    Ws();
    if (p_ != s_.size()) Fail("trailing data after the object");
    if (!have_role) Fail("missing key \"role\"");
    if (!have_content) Fail("missing key \"content\"");
    if (have_reasoning && m.role != Role::kAssistant) Fail("reasoning_content on a non-assistant message");
    return m;
  }

 private:
  [[noreturn]] void Fail(const std::string& what) const { throw BadInput(where_ + ": " + what); }
  char Peek() const { return p_ < s_.size() ? s_[p_] : '\0'; }
  void Ws() {
    while (p_ < s_.size() && (s_[p_] == ' ' || s_[p_] == '\t')) ++p_;
  }
  void Expect(char c) {
    if (p_ >= s_.size() || s_[p_] != c) Fail(std::string("expected '") + c + "' at column " + std::to_string(p_ + 1));
    ++p_;
  }
  unsigned Hex4() {
    if (p_ + 4 > s_.size()) Fail("truncated \\u escape");
    unsigned v = 0;
    for (int i = 0; i < 4; ++i) {
      const char c = s_[p_++];
      v <<= 4;
      if (c >= '0' && c <= '9') v |= c - '0';
      else if (c >= 'a' && c <= 'f') v |= c - 'a' + 10;
      else if (c >= 'A' && c <= 'F') v |= c - 'A' + 10;
      else Fail("bad \\u escape");
    }
    return v;
  }
  static void PutUtf8(unsigned cp, std::string* out) {
    if (cp < 0x80) {
      *out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      *out += static_cast<char>(0xC0 | (cp >> 6));
      *out += static_cast<char>(0x80 | (cp & 63));
    } else if (cp < 0x10000) {
      *out += static_cast<char>(0xE0 | (cp >> 12));
      *out += static_cast<char>(0x80 | ((cp >> 6) & 63));
      *out += static_cast<char>(0x80 | (cp & 63));
    } else {
      *out += static_cast<char>(0xF0 | (cp >> 18));
      *out += static_cast<char>(0x80 | ((cp >> 12) & 63));
      *out += static_cast<char>(0x80 | ((cp >> 6) & 63));
      *out += static_cast<char>(0x80 | (cp & 63));
    }
  }
  std::string String() {
    if (Peek() != '"') {
      if (Peek() == 'n' && s_.substr(p_, 4) == "null") Fail("null is not a string");
      Fail("expected a string at column " + std::to_string(p_ + 1));
    }
    ++p_;
    std::string out;
    for (;;) {
      if (p_ >= s_.size()) Fail("unterminated string");
      const char c = s_[p_++];
      if (c == '"') return out;
      if (static_cast<unsigned char>(c) < 0x20) Fail("raw control byte inside a string");
      if (c != '\\') {
        out += c;
        continue;
      }
      if (p_ >= s_.size()) Fail("unterminated string");
      const char e = s_[p_++];
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          unsigned cp = Hex4();
          if (cp == 0) Fail("\\u0000 is not allowed");
          if (cp >= 0xDC00 && cp <= 0xDFFF) Fail("unpaired surrogate");
          if (cp >= 0xD800 && cp <= 0xDBFF) {
            if (s_.substr(p_, 2) != "\\u") Fail("unpaired surrogate");
            p_ += 2;
            const unsigned lo = Hex4();
            if (lo < 0xDC00 || lo > 0xDFFF) Fail("unpaired surrogate");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          }
          PutUtf8(cp, &out);
          break;
        }
        default: Fail(std::string("bad escape \\") + e);
      }
    }
  }

  std::string_view s_;
  const std::string& where_;
  size_t p_ = 0;
};

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
  return LineParser(line, where).Parse();
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
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    if (missing_ok && errno == ENOENT) return {};
    throw BadInput(path + ": cannot open");
  }
  std::ostringstream ss;
  ss << f.rdbuf();
  const std::string text = ss.str();
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
  std::string tmp = path + ".tmp.XXXXXX";
  const int fd = mkstemp(tmp.data());
  if (fd < 0) throw RuntimeFailure(path + ": cannot create temp file: " + std::strerror(errno));
  FILE* f = fdopen(fd, "wb");
  if (!f) {
    close(fd);
    unlink(tmp.c_str());
    throw RuntimeFailure(path + ": fdopen failed");
  }
  const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size() && std::fflush(f) == 0 &&
                  fsync(fileno(f)) == 0;
  const int err = errno;
  const bool closed = std::fclose(f) == 0;
  if (!ok || !closed || std::rename(tmp.c_str(), path.c_str()) != 0) {
    unlink(tmp.c_str());
    throw RuntimeFailure(path + ": cannot write history: " + std::strerror(ok ? errno : err));
  }
  // mkstemp creates 0600; history is an ordinary user file.
  chmod(path.c_str(), 0644);
}

}  // namespace k3::tok
