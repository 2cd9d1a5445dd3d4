#include "common/chat_control_ids.h"

namespace k3 {

const std::vector<ControlIdQuery>& ControlIdQueries() {
  static const std::vector<ControlIdQuery> q = {{"<|open|>", true}, {"<|close|>", true}, {"<|sep|>", true},
                                                {"<|end_of_msg|>", true}, {"[EOS]", true}, {"think", false},
                                                {"response", false}, {"message", false},
                                                {"tools", false}, {"call", false}, {"json", false}};
  return q;
}

std::variant<ChatControlIds, ControlIdProblem> ControlIdsFrom(const std::map<std::string, std::vector<int32_t>>& answers,
                                                              int32_t vocab) {
  auto ids = [&](const char* t) {
    const auto it = answers.find(t);
    return it == answers.end() ? std::vector<int32_t>{} : it->second;
  };
  ChatControlIds c;
  const std::pair<const char*, int32_t*> specials[] = {
      {"<|open|>", &c.open}, {"<|close|>", &c.close}, {"<|sep|>", &c.sep}, {"<|end_of_msg|>", &c.eom}, {"[EOS]", &c.eos}};
  for (const auto& [t, out] : specials) {
    const std::vector<int32_t> v = ids(t);
    if (v.size() != 1) return ControlIdProblem{t, false, -1};
    *out = v[0];
  }
  for (const auto& [t, out] : specials)
    if (*out < 0 || *out >= vocab) return ControlIdProblem{t, true, *out};
  c.think = ids("think");
  c.response = ids("response");
  c.message = ids("message");
  c.tools = ids("tools");
  c.call = ids("call");
  c.json = ids("json");
  return c;
}

}  // namespace k3
