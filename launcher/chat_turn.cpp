#include "launcher/chat_turn.h"

#include <algorithm>
#include <filesystem>

namespace k3::launch {

std::optional<std::vector<int32_t>> NewTurnIds(const std::vector<int32_t>& rendered,
                                               const std::vector<int32_t>& previous_rendered, int32_t eom) {
  if (previous_rendered.empty() || rendered.size() <= previous_rendered.size() ||
      !std::equal(previous_rendered.begin(), previous_rendered.end(), rendered.begin()))
    return std::nullopt;
  const auto end = std::find(rendered.begin() + static_cast<std::ptrdiff_t>(previous_rendered.size()), rendered.end(), eom);
  if (end == rendered.end() || end + 1 == rendered.end()) return std::nullopt;
  return std::vector<int32_t>(end + 1, rendered.end());
}

TurnPlan PlanTurn(const std::vector<int32_t>& rendered, const std::vector<int32_t>& last_render, bool state_valid,
                  int64_t kept, int32_t eom, int64_t context) {
  TurnPlan p;
  p.send = rendered;
  if (state_valid && kept > 0)
    if (auto n = NewTurnIds(rendered, last_render, eom)) {
      p.send = std::move(*n);
      p.keep = true;
    }
  p.reused = p.keep ? kept : 0;
  p.room = context - p.reused - static_cast<int64_t>(p.send.size());
  return p;
}

ipc::compute::Generate TurnGenerate(const LaunchOptions& opt, const TurnPlan& plan, const ChatControlIds& ids,
                                    uint64_t request_id) {
  ipc::compute::Generate g;
  g.request_id = request_id;
  g.ids = plan.send;
  g.gen = static_cast<int32_t>(std::min<int64_t>(opt.gen, plan.room));
  g.full_recompute = opt.full_recompute;
  g.prefill_chunk = 0;  // compute's --prefill-chunk: the plan's chunk (command_lines.cpp)
  g.stop_ids = opt.stop_ids;
  for (int32_t id : {ids.eom, ids.eos})
    if (std::find(g.stop_ids.begin(), g.stop_ids.end(), id) == g.stop_ids.end()) g.stop_ids.push_back(id);
  g.keep_state = plan.keep;
  g.max_positions = static_cast<int32_t>(opt.context);
  return g;
}

int64_t KeptAfterTurn(int64_t done_position, int64_t reused, int64_t prompt, int64_t generated) {
  return done_position > 0 ? done_position : reused + prompt + generated;
}

ChatCommand ParseChatCommand(const std::string& line) {
  const size_t sp = line.find(' ');
  ChatCommand c{line.substr(0, sp), sp == std::string::npos ? "" : line.substr(sp + 1)};
  while (!c.arg.empty() && c.arg.back() == ' ') c.arg.pop_back();
  while (!c.arg.empty() && c.arg.front() == ' ') c.arg.erase(0, 1);
  if (!c.arg.empty() && (c.cmd == "/save" || c.cmd == "/load")) {
    std::error_code ec;
    const auto abs = std::filesystem::absolute(c.arg, ec);
    if (!ec) c.arg = abs.string();
  }
  return c;
}

}  // namespace k3::launch
