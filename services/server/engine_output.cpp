// A request's output: its tokens turned into text in order (the chat's reasoning and response
// channels apart, cut at a stop string, with logprobs) and handed to its HTTP thread as
// Deltas; and its end, finished or failed.
#include <algorithm>

#include "common/ipc/protocol.h"
#include "services/server/engine.h"
#include "services/server/engine_errors.h"

namespace k3::server {
namespace cp = ipc::compute;
using Channel = ChannelSplitter::Channel;

void Engine::Emit(Active& a, Delta d) {
  if (d.reasoning.empty() && d.content.empty() && d.logprobs.empty()) return;
  std::lock_guard<std::mutex> lock(a.job->mu);
  a.job->deltas.push_back(std::move(d));
  a.job->cv.notify_all();
}

// Turns the tokens whose bytes are known into text, in order; a stop string found cancels the
// request at compute's next step.
void Engine::Process(Active& a) {
  const std::vector<int32_t> stops = StopIdsFor(a);
  const bool chat = a.split.has_value();
  Delta d;
  auto show = [&](bool final) {
    for (Channel ch : {Channel::kThink, Channel::kResponse}) {
      const size_t c = static_cast<size_t>(ch);
      const size_t upto = final ? a.raw[c].size() : CompleteUtf8Prefix(a.raw[c]);
      if (upto <= a.shown[c]) continue;
      const std::string piece = a.raw[c].substr(a.shown[c], upto - a.shown[c]);
      a.shown[c] = upto;
      if (ch == Channel::kThink) {
        d.reasoning += piece;
      } else if (!a.stop_matched) {
        d.content += a.stop.Feed(piece);
        a.stop_matched = a.stop.matched();
      }
    }
  };
  while (a.processed < a.tokens.size() && !a.stop_matched) {
    const cp::Token& t = a.tokens[a.processed];
    bool ready = HaveBytes(t.id);
    for (const cp::TopLogprob& alt : t.top) ready = HaveBytes(alt.id) && ready;
    if (!ready) break;
    const bool ends = std::binary_search(stops.begin(), stops.end(), t.id);
    const Channel ch = chat ? a.split->Push(t.id) : Channel::kResponse;
    // usage's reasoning_tokens: every id before the answer's first (the reasoning and the tags
    // that close it and open the answer), so reasoning + answer ids = completion_tokens.
    if (chat && a.job->spec.thinking && !a.answer_started) {
      if (ch == Channel::kResponse) a.answer_started = true;
      else ++a.reasoning_tokens;
    }
    if (!ends && ch != Channel::kNone) {
      a.raw[static_cast<size_t>(ch)] += bytes_[t.id];
      if (ch == Channel::kResponse && a.job->spec.logprobs >= 0) {
        TokenLogprob lp{bytes_[t.id], t.logprob, {}};
        for (const cp::TopLogprob& alt : t.top) lp.top.emplace_back(bytes_[alt.id], alt.logprob);
        d.logprobs.push_back(std::move(lp));
      }
    }
    ++a.processed;
    show(false);
  }
  if (a.stop_matched) SendCancel(a);
  const bool finished = a.done && (a.stop_matched || a.processed == a.tokens.size());
  if (finished) {
    show(true);
    if (!a.stop_matched) d.content += a.stop.Finish();
  }
  Emit(a, std::move(d));
  if (finished) Finish(a.job->id);
}

void Engine::Finish(uint64_t id) {
  Active& a = active_.at(id);
  const cp::Done& done = *a.done;
  running_.erase(id);
  if (done.reason == cp::StopReason::kInterrupted) return Fail(id, ShuttingDown(), Outcome::kFailed);
  if (done.reason == cp::StopReason::kCancelled && !a.stop_matched) return Fail(id, ClientGone(), Outcome::kCancelled);
  metrics_.Count(Outcome::kCompleted);
  metrics_.Tokens(static_cast<int64_t>(a.prompt.size()), done.stats.generated_tokens, done.stats.cached_tokens);
  const size_t n = a.tokens.size();
  metrics_.RequestDone(std::chrono::duration<double>(std::chrono::steady_clock::now() - a.job->arrived).count(),
                       n >= 2 ? std::chrono::duration<double>(a.last_token_at - a.first_token_at).count() /
                                    static_cast<double>(n - 1)
                              : -1.0);
  {
    std::lock_guard<std::mutex> lock(a.job->mu);
    Job& j = *a.job;
    j.phase = Job::Phase::kFinished;
    j.finish_reason = a.stop_matched || done.reason == cp::StopReason::kStopId ? "stop" : "length";
    j.prompt_tokens = static_cast<int64_t>(a.prompt.size());
    j.completion_tokens = done.stats.generated_tokens;
    j.cached_tokens = done.stats.cached_tokens;
    j.reasoning_tokens = a.reasoning_tokens;
    j.prefill_seconds = done.stats.prefill_seconds;
    j.seconds_per_token = done.stats.seconds_per_token;
    for (const cp::Token& t : a.tokens) j.token_ids.push_back(t.id);
    j.cv.notify_all();
  }
  active_.erase(id);
}

void Engine::Fail(uint64_t id, HttpError e, Outcome outcome) {
  const auto it = active_.find(id);
  if (it == active_.end()) return;
  Active& a = it->second;
  if (!a.dispatched) {
    std::lock_guard<std::mutex> lock(inbox_mu_);
    --pending_;
  }
  waiting_.erase(std::remove(waiting_.begin(), waiting_.end(), id), waiting_.end());
  running_.erase(id);
  metrics_.Count(outcome);
  {
    std::lock_guard<std::mutex> lock(a.job->mu);
    a.job->phase = Job::Phase::kFailed;
    a.job->error = std::move(e);
    a.job->cv.notify_all();
  }
  active_.erase(it);
}

}  // namespace k3::server
