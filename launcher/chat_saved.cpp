#include "launcher/chat_saved.h"

#include <nlohmann/json.hpp>
#include <stdexcept>

namespace k3::launch {

std::string SavedChatExtra(const SavedChat& s) {
  const nlohmann::json extra = {{"k3_chat", kChatStateVersion},  {"history", HistoryJsonl(s.history)},
                                {"thinking", s.thinking},         {"thinking_effort", s.effort},
                                {"last_render", s.last_render},   {"state_valid", s.state_valid},
                                {"closing", s.closing}};
  return extra.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

SavedChat ParseSavedChat(const std::string& extra) {
  const nlohmann::json x = nlohmann::json::parse(extra);
  const int version = x.value("k3_chat", 0);
  if (version != 1 && version != kChatStateVersion) throw std::runtime_error("no chat history in it");
  SavedChat s;
  const std::string jsonl = x.at("history").get<std::string>();
  for (size_t p = 0; p < jsonl.size();) {
    size_t nl = jsonl.find('\n', p);
    if (nl == std::string::npos) nl = jsonl.size();
    const nlohmann::json m = nlohmann::json::parse(jsonl.substr(p, nl - p));
    s.history.push_back({m.at("role").get<std::string>(), m.at("content").get<std::string>(),
                         m.contains("reasoning_content") ? std::optional<std::string>(m["reasoning_content"].get<std::string>())
                                                         : std::nullopt});
    p = nl + 1;
  }
  s.thinking = x.at("thinking").get<bool>();
  s.effort = x.at("thinking_effort").get<std::string>();
  s.last_render = x.at("last_render").get<std::vector<int32_t>>();
  s.state_valid = x.at("state_valid").get<bool>();
  if (version >= 2) s.closing = x.at("closing").get<std::vector<int32_t>>();
  return s;
}

}  // namespace k3::launch
