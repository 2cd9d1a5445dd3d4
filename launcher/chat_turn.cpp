#include "launcher/chat_turn.h"

#include <algorithm>
#include <climits>
#include <cstdio>
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

std::optional<std::vector<int32_t>> ReplyClosing(const std::vector<int32_t>& generated, const ChatControlIds& ids,
                                                 bool thinking) {
  // The reply after the generation prompt: payloads (any ids but the template's own) and the
  // fixed control runs between them. An empty run is a payload.
  auto tag = [&](int32_t mark, const std::vector<int32_t>& name) {
    std::vector<int32_t> v{mark};
    v.insert(v.end(), name.begin(), name.end());
    v.push_back(ids.sep);
    return v;
  };
  auto cat = [](std::vector<int32_t> a, const std::vector<int32_t>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
  };
  const std::vector<int32_t> end_of_response =
      cat(cat(tag(ids.close, ids.response), tag(ids.close, ids.message)), {ids.eom});
  std::vector<std::vector<int32_t>> parts;
  if (thinking) parts = {{}, cat(tag(ids.close, ids.think), tag(ids.open, ids.response))};
  parts.push_back({});
  parts.push_back(end_of_response);

  size_t part = 0, at = 0;  // the part the next id belongs to; the position in a fixed run
  for (int32_t id : generated) {
    if (id == ids.eom || id == ids.eos) return std::vector<int32_t>{};  // it ended (compute stops there)
    const bool control = id == ids.open || id == ids.close || id == ids.sep;
    if (part < parts.size() && parts[part].empty()) {
      if (!control) continue;  // payload
      ++part;                  // the fixed run after the payload starts here
      at = 0;
    }
    if (part >= parts.size() || at >= parts[part].size() || parts[part][at] != id) return std::nullopt;
    if (++at == parts[part].size()) {
      ++part;
      at = 0;
    }
  }
  std::vector<int32_t> closing;
  for (size_t p = part; p < parts.size(); ++p)
    closing.insert(closing.end(), parts[p].begin() + static_cast<std::ptrdiff_t>(p == part ? at : 0), parts[p].end());
  return closing;
}

TurnPlan PlanTurn(const std::vector<int32_t>& rendered, const KeptConversation& kept, int32_t eom, int64_t context) {
  TurnPlan p;
  p.send = rendered;
  if (kept.valid && kept.ids > 0)
    if (auto n = NewTurnIds(rendered, kept.last_render, eom)) {
      p.send = kept.closing;
      p.send.insert(p.send.end(), n->begin(), n->end());
      p.keep = true;
    }
  p.reused = p.keep ? kept.ids : 0;
  p.room = context - p.reused - static_cast<int64_t>(p.send.size());
  return p;
}

ipc::compute::Generate TurnGenerate(const LaunchOptions& opt, const TurnPlan& plan, const ChatControlIds& ids,
                                    uint64_t request_id, const ipc::compute::Sampling& sampling) {
  ipc::compute::Generate g;
  g.sampling = sampling;
  g.request_id = request_id;
  g.ids = plan.send;
  const int64_t most = opt.reply_limit > 0 ? std::min(opt.reply_limit, plan.room) : plan.room;
  g.gen = static_cast<int32_t>(std::clamp<int64_t>(most, 0, INT32_MAX));
  g.full_recompute = opt.full_recompute;
  g.prefill_chunk = 0;  // compute's --prefill-chunk: the plan's chunk (command_lines.cpp)
  g.stop_ids = opt.stop_ids;
  for (int32_t id : {ids.eom, ids.eos})
    if (std::find(g.stop_ids.begin(), g.stop_ids.end(), id) == g.stop_ids.end()) g.stop_ids.push_back(id);
  g.keep_state = plan.keep;
  g.snapshot_at = static_cast<int32_t>(BeforeNewestMessage(plan.send, ids.eom));
  g.max_positions = static_cast<int32_t>(std::min<int64_t>(opt.context, INT32_MAX));
  return g;
}

int64_t KeptAfterTurn(int64_t done_position, int64_t reused, int64_t prompt, int64_t generated) {
  return done_position > 0 ? done_position : reused + prompt + generated;
}

KeptConversation AfterTurn(const TurnPlan& plan, const std::vector<int32_t>& rendered,
                           const std::vector<int32_t>& generated, int64_t done_position, const ChatControlIds& ids,
                           bool thinking) {
  KeptConversation k;
  const auto sent = static_cast<int64_t>(plan.send.size()), made = static_cast<int64_t>(generated.size());
  k.ids = KeptAfterTurn(done_position, plan.reused, sent, made);
  k.last_render = rendered;
  const std::optional<std::vector<int32_t>> closing = ReplyClosing(generated, ids, thinking);
  k.valid = k.ids == plan.reused + sent + made && closing.has_value();
  if (k.valid) k.closing = *closing;
  return k;
}

namespace {
// "first token 0.042 s, 4.8 tokens/s": the rate of the ids after the first, when there are two or more.
std::string FirstTokenText(const ChatTurn& t) {
  if (!t.first_token_seconds) return "no token";
  char first[80];
  const double decode = t.seconds - *t.first_token_seconds;
  if (t.generated_tokens > 1 && decode > 0)
    std::snprintf(first, sizeof first, "first token %.3f s, %.1f tokens/s", *t.first_token_seconds,
                  static_cast<double>(t.generated_tokens - 1) / decode);
  else
    std::snprintf(first, sizeof first, "first token %.3f s", *t.first_token_seconds);
  return first;
}
}  // namespace

std::string TurnSummary(const ChatTurn& t, int64_t reply_limit) {
  std::string why = t.finish_reason;
  if (t.finish_reason == "cancelled") why = "stopped by Ctrl-C";
  else if (t.finish_reason == "length")
    why = reply_limit > 0 && t.generated_tokens >= reply_limit
              ? "--reply-limit " + std::to_string(reply_limit) + " reached"
              : "the context is full";
  char line[256];
  std::snprintf(line, sizeof line, "[chat] %lld tokens (%s) in %.2f s, %s; %lld ids reused, %lld prefilled",
                static_cast<long long>(t.generated_tokens), why.c_str(), t.seconds, FirstTokenText(t).c_str(),
                static_cast<long long>(t.reused_tokens), static_cast<long long>(t.prompt_tokens));
  return line;
}

std::string PromptSummary(const ChatTurn& t) {
  char line[256];
  std::snprintf(line, sizeof line, "[connect] %lld tokens (%s) in %.2f s, %s; %lld prompt tokens, %lld cached",
                static_cast<long long>(t.generated_tokens), t.finish_reason.c_str(), t.seconds,
                FirstTokenText(t).c_str(), static_cast<long long>(t.prompt_tokens + t.reused_tokens),
                static_cast<long long>(t.reused_tokens));
  return line;
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
