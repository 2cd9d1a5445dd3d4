// A request's output: its tokens turned into text in order (the chat's reasoning and response
// channels apart, cut at a stop string, with logprobs) and handed to its HTTP thread as
// Deltas; and its end, finished or failed.
#include <algorithm>
#include <cstdio>
#include <iostream>

#include "common/ipc/protocol.h"
#include "common/sampling_params.h"
#include "services/server/engine.h"
#include "services/server/engine_errors.h"
#include "services/server/tool_calls.h"

namespace k3::server {
namespace cp = ipc::compute;
using Channel = ChannelSplitter::Channel;

std::string ToolCallIdPrefix() {
  char buf[32];
  std::snprintf(buf, sizeof buf, "call_%016llx_", static_cast<unsigned long long>(RandomSeed()));
  return buf;
}

void Engine::Emit(Active& a, Delta d) {
  if (d.reasoning.empty() && d.content.empty() && d.logprobs.empty() && d.tool_calls.empty()) return;
  std::lock_guard<std::mutex> lock(a.job->mu);
  a.job->deltas.push_back(std::move(d));
  a.job->cv.notify_all();
}

// True when the bytes of every id of the tools channel are known (a prefilled channel's ids
// come from the prompt, whose bytes were not asked for); else asks for them.
bool Engine::ToolBytesKnown(Active& a) {
  bool known = true;
  for (int32_t id : a.tool_ids) known = HaveBytes(id) && known;
  return known;
}

// Hands out the calls of the tools channel that are complete and not handed out yet, each in
// Deltas of its own after `d` (flushed first, so the order is kept); at the end, the calls
// refused join the content and are reported.
void Engine::EmitToolCalls(Active& a, Delta& d, bool final) {
  const std::vector<XtmlPiece> pieces =
      XtmlPieces(a.tool_ids, *chat_ids_, [&](int32_t id) -> const std::string& { return bytes_.at(id); });
  const ToolCallsParse parsed = ParseToolCalls(pieces, a.job->spec.tools, final);
  if (parsed.calls.size() > a.calls_sent) {
    Emit(a, std::move(d));
    d = Delta{};
  }
  for (; a.calls_sent < parsed.calls.size(); ++a.calls_sent) {
    const ParsedCall& c = parsed.calls[a.calls_sent];
    const int index = static_cast<int>(a.calls_sent);
    Delta start;
    start.tool_calls.push_back({index, a.call_id_prefix + std::to_string(index), c.name, ""});
    Emit(a, std::move(start));
    for (const std::string& f : c.fragments) {
      Delta frag;
      frag.tool_calls.push_back({index, "", "", f});
      Emit(a, std::move(frag));
    }
  }
  if (!final) return;
  for (const CallProblem& p : parsed.problems) {
    std::cerr << "[server] request " << a.job->id << ": a tool call from the model was not accepted: " << p.error << "\n";
    d.content += p.raw;
  }
  std::lock_guard<std::mutex> lock(a.job->mu);
  a.job->tool_call_errors = parsed.problems;
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
    // that close it and open the answer or the tool calls), so reasoning + answer ids =
    // completion_tokens.
    if (chat && a.job->spec.thinking && !a.answer_started) {
      if (ch == Channel::kResponse || ch == Channel::kTools) a.answer_started = true;
      else ++a.reasoning_tokens;
    }
    if (!ends && ch == Channel::kTools) {
      a.tool_ids.push_back(t.id);
      ++a.processed;
      show(false);
      if (t.id == chat_ids_->sep && ToolBytesKnown(a)) EmitToolCalls(a, d, false);
      continue;
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
  const bool finished = a.done && (a.stop_matched || a.processed == a.tokens.size()) && ToolBytesKnown(a);
  if (finished) {
    show(true);
    if (!a.stop_matched) d.content += a.stop.Finish();
    if (chat && !a.stop_matched && !a.tool_ids.empty()) EmitToolCalls(a, d, true);
  }
  Emit(a, std::move(d));
  if (finished) Finish(a.job->id);
}

void Engine::Finish(uint64_t id) {
  Active& a = active_.at(id);
  const cp::Done& done = *a.done;
  running_.erase(id);
  if (done.reason == cp::StopReason::kInterrupted) return Fail(id, ShuttingDown(), Outcome::kFailed);
  if (done.reason == cp::StopReason::kCancelled && !a.stop_matched && (!a.run_timed_out || a.job->client_gone))
    return Fail(id, ClientGone(), Outcome::kCancelled);
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
    if (j.finish_reason == "stop" && !a.stop_matched && a.calls_sent > 0) j.finish_reason = "tool_calls";
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
