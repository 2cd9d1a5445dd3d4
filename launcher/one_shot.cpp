#include "launcher/one_shot.h"

#include <algorithm>
#include <climits>

namespace k3::launch {

ipc::compute::Generate OneShotGenerate(const LaunchOptions& opt, const std::vector<int32_t>& ids,
                                       const std::vector<int32_t>& stop_ids) {
  ipc::compute::Generate g;
  g.request_id = kGenerateId;
  g.ids = ids;
  g.gen = static_cast<int32_t>(opt.gen);
  g.full_recompute = opt.full_recompute;
  g.prefill_chunk = 0;  // compute's --prefill-chunk: the plan's chunk (command_lines.cpp)
  g.stop_ids = stop_ids;
  g.keep_state = !opt.load_state.empty();  // appended to the loaded sequence
  g.max_positions = static_cast<int32_t>(std::min<int64_t>(opt.context, INT32_MAX));
  g.sampling = opt.sampling;
  g.logprobs = opt.logprobs;
  g.perplexity = opt.perplexity;
  g.spec = static_cast<int32_t>(opt.spec);
  return g;
}

std::string LostTokensWarning(const ipc::compute::RunStats& d, size_t generated, size_t prompt_sent) {
  if (d.generated_tokens == static_cast<int32_t>(generated) && d.prompt_tokens == static_cast<int32_t>(prompt_sent))
    return "";
  return "[launch] warning: compute generated " + std::to_string(d.generated_tokens) + " tokens for a prompt of " +
         std::to_string(d.prompt_tokens) + ", but " + std::to_string(generated) + " arrived for a prompt of " +
         std::to_string(prompt_sent);
}

bool OneShot::OnToken(const ipc::compute::Token& t, Clock::time_point now) {
  if (t.request_id != kGenerateId || t.index != static_cast<int32_t>(generated_.size())) return false;
  generated_.push_back(t.id);
  if (keep_logprobs_) tokens_.push_back(t);
  arrivals_.push_back(now);
  return true;
}

std::optional<std::string> OneShot::OnDone(const ipc::compute::Done& d) {
  if (d.request_id != kGenerateId) return std::nullopt;
  done_ = d.stats;
  finish_reason_ = d.reason;
  return LostTokensWarning(d.stats, generated_.size(), prompt_sent_);
}

double OneShot::decode_seconds() const {
  if (arrivals_.size() < 2) return 0;
  return std::chrono::duration<double>(arrivals_.back() - arrivals_.front()).count();
}

std::optional<double> OneShot::first_token_seconds() const {
  if (arrivals_.empty()) return std::nullopt;
  return std::chrono::duration<double>(arrivals_.front() - t_generate_).count();
}

std::vector<double> OneShot::token_seconds() const {
  std::vector<double> out;
  for (size_t i = 1; i < arrivals_.size(); ++i)
    out.push_back(std::chrono::duration<double>(arrivals_[i] - arrivals_[i - 1]).count());
  return out;
}

}  // namespace k3::launch
