#include "launcher/input_history.h"

#include <nlohmann/json.hpp>

namespace k3::launch {

InputHistory ParseInputHistory(const std::string& text) {
  InputHistory h;
  size_t at = 0, line = 0;
  while (at < text.size()) {
    size_t nl = text.find('\n', at);
    if (nl == std::string::npos) nl = text.size();
    ++line;
    const std::string row = text.substr(at, nl - at);
    at = nl + 1;
    if (row.empty()) continue;
    const nlohmann::json j = nlohmann::json::parse(row, nullptr, false);
    if (!j.is_string()) {
      h.bad_line = line;
      h.entries.clear();
      return h;
    }
    h.entries.push_back(j.get<std::string>());
  }
  return h;
}

std::string InputHistoryText(const std::vector<std::string>& entries, size_t max) {
  std::string out;
  const size_t from = entries.size() > max ? entries.size() - max : 0;
  for (size_t i = from; i < entries.size(); ++i)
    out += nlohmann::json(entries[i]).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  return out;
}

std::string DefaultInputHistoryPath(const char* xdg_state_home, const char* home) {
  const std::string name = "/k3/chat-input-history.jsonl";
  if (xdg_state_home && *xdg_state_home == '/') return xdg_state_home + name;  // the spec: relative ones are ignored
  if (home && *home) return std::string(home) + "/.local/state" + name;
  return "";
}

std::string InputHistoryFile(const std::string& option, const char* xdg_state_home, const char* home) {
  if (option == "off") return "";
  return option.empty() ? DefaultInputHistoryPath(xdg_state_home, home) : option;
}

std::string PastedText(const std::string& raw) {
  std::string s;
  for (size_t i = 0; i < raw.size(); ++i) {
    if (raw[i] != '\r') s += raw[i];
    else if (i + 1 >= raw.size() || raw[i + 1] != '\n') s += '\n';
  }
  return s;
}

}  // namespace k3::launch
