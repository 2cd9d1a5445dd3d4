#include "common/json_strict.h"

#include <unordered_set>
#include <vector>

namespace k3 {

std::string Printable(std::string_view s) {
  static const char kHex[] = "0123456789abcdef";
  constexpr size_t kMax = 200;
  std::string out;
  for (size_t i = 0; i < s.size() && i < kMax; ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c >= 0x7f) {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    } else {
      out += static_cast<char>(c);
    }
  }
  if (s.size() > kMax) out += "...";
  return out;
}

nlohmann::json ParseJsonStrict(std::string_view text, const std::string& what_for, ExitCode code) {
  // One key set per open object; a key seen twice in the same object is recorded and
  // reported after parsing (throwing from inside the callback would also work, but
  // keeping the parser's own error path separate makes the messages clearer).
  std::vector<std::unordered_set<std::string>> open;
  std::string duplicate;
  bool have_duplicate = false;
  auto cb = [&](int /*depth*/, nlohmann::json::parse_event_t ev, nlohmann::json& parsed) {
    switch (ev) {
      case nlohmann::json::parse_event_t::object_start:
        open.emplace_back();
        break;
      case nlohmann::json::parse_event_t::object_end:
        if (!open.empty()) open.pop_back();
        break;
      case nlohmann::json::parse_event_t::key:
        if (!open.empty() && !open.back().insert(parsed.get<std::string>()).second &&
            !have_duplicate) {
          have_duplicate = true;
          duplicate = parsed.get<std::string>();
        }
        break;
      default:
        break;
    }
    return true;
  };
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text.begin(), text.end(), cb, /*allow_exceptions=*/true,
                              /*ignore_comments=*/false);
  } catch (const nlohmann::json::exception& e) {
    // nlohmann messages are single-line; they carry the byte position and the reason
    // (including "ill-formed UTF-8 byte").
    throw Error(code, what_for + ": invalid JSON: " + Printable(e.what()));
  }
  if (have_duplicate) throw Error(code, what_for + ": duplicate key \"" + Printable(duplicate) + "\"");
  return j;
}

}  // namespace k3
