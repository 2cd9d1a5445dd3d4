#include "common/id_list.h"

#include <cstdio>
#include <string>

namespace k3 {
namespace {

// The item as it can be printed on one line: control bytes as \xNN, long items cut.
std::string Printable(std::string_view item) {
  std::string out;
  for (char c : item.substr(0, 40)) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      char hex[5];
      std::snprintf(hex, sizeof hex, "\\x%02x", static_cast<unsigned char>(c));
      out += hex;
    } else {
      out += c;
    }
  }
  if (item.size() > 40) out += "...";
  return out;
}

}  // namespace

std::vector<int64_t> ParseIdList(std::string_view text, std::string_view what, int64_t limit, ExitCode code) {
  std::vector<int64_t> out;
  if (text.empty()) return out;
  const auto fail = [&](std::string_view item, const std::string& why) {
    return Error(code, std::string(what) + ": '" + Printable(item) + "' " + why);
  };
  size_t pos = 0;
  for (;;) {
    const size_t comma = std::min(text.find(',', pos), text.size());
    const std::string_view item = text.substr(pos, comma - pos);
    if (item.empty()) throw fail(item, "is empty: expected comma-separated non-negative integers");
    int64_t v = 0;
    for (char c : item) {
      if (c < '0' || c > '9') throw fail(item, "is not a non-negative integer");
      const int d = c - '0';
      if (v > (limit - 1 - d) / 10) throw fail(item, "is out of range [0, " + std::to_string(limit) + ")");
      v = v * 10 + d;
    }
    if (v >= limit) throw fail(item, "is out of range [0, " + std::to_string(limit) + ")");
    out.push_back(v);
    if (comma == text.size()) return out;
    pos = comma + 1;
  }
}

}  // namespace k3
