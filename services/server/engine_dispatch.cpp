// The engine's queue: submitted jobs get their prompt ids (given, or from the tokenizer), are
// checked, wait for one of compute's max_batch places and go out as independent Generates;
// a client that went away gets a Cancel. Compute's replies are filed by request.
#include <algorithm>
#include <climits>
#include <cstdio>

#include "common/end_ids.h"
#include "common/ipc/protocol.h"
#include "common/ipc/zmq_channel.h"
#include "services/server/cache_partition.h"
#include "services/server/compute_liveness.h"
#include "services/server/status_headers.h"
#include "services/server/engine.h"
#include "services/server/engine_errors.h"

namespace k3::server {
namespace cp = ipc::compute;
namespace tk = ipc::tokenizer;
using ipc::Clock;

void Engine::TakeSubmitted() {
  std::deque<std::shared_ptr<Job>> jobs;
  {
    std::lock_guard<std::mutex> lock(inbox_mu_);
    jobs.swap(inbox_);
  }
  for (std::shared_ptr<Job>& job : jobs) {
    const uint64_t id = job->id;
    const RequestSpec& spec = job->spec;
    auto [it, _] = active_.try_emplace(id, job);
    Active& a = it->second;
    if (spec.endpoint == Endpoint::kChat) a.split.emplace(*chat_ids_, spec.thinking);
    a.call_id_prefix = ToolCallIdPrefix();
    if (spec.prompt_ids) {
      OnPromptIds(id, *spec.prompt_ids);
      continue;
    }
    const bool sent = SendTokenizer(TokPending{TokKind::kPrompt, id, -1, {}}, [&](uint64_t tid) {
      return spec.endpoint == Endpoint::kChat
                 ? ipc::Encode(tk::RenderChat{tid, HistoryJsonl(spec.messages), spec.thinking, spec.effort,
                                                       spec.tools_json, spec.tools.choice, spec.continue_final,
                                                       spec.forced_call})
                 : ipc::Encode(tk::Encode{tid, spec.prompt_text, false});
    });
    if (!sent)
      Fail(id,
           MakeHttpError(413,
                         std::string(spec.endpoint == Endpoint::kChat ? "the conversation" : "the prompt") +
                             " is larger than the tokenizer's message limit of " +
                             std::to_string(ipc::kMaxTokenizerPayload >> 20) + " MiB",
                         "invalid_request_error", "prompt_too_large"),
           Outcome::kInvalid);
  }
}

void Engine::OnPromptIds(uint64_t id, std::vector<int32_t> ids) {
  const auto it = active_.find(id);
  if (it == active_.end()) return;  // the client went away meanwhile
  Active& a = it->second;
  auto invalid = [&](std::string message, std::string code) {
    Fail(id, MakeHttpError(400, std::move(message), "invalid_request_error", std::move(code)), Outcome::kInvalid);
  };
  if (ids.empty()) return invalid("the prompt encodes to no tokens", "invalid_prompt");
  for (int32_t t : ids)
    if (t < 0 || t >= cfg_.vocab)
      return invalid("prompt token id " + std::to_string(t) + " is outside the vocabulary [0, " +
                         std::to_string(cfg_.vocab) + ")",
                     "invalid_prompt");
  if (static_cast<int64_t>(ids.size()) >= cfg_.context)
    return invalid("the prompt has " + std::to_string(ids.size()) + " tokens but the context is " +
                       std::to_string(cfg_.context) + ": no room to generate",
                   "context_length_exceeded");
  if (a.job->spec.json_schema && a.job->spec.endpoint != Endpoint::kChat && cfg_.stop_ids.empty())
    return invalid("'response_format' needs an end id to end the value with, and this model has none", "");
  a.prompt = std::move(ids);
  if (a.split && (a.job->spec.continue_final || !a.job->spec.forced_call.empty())) {
    // The message the model continues (or a forced call's, opened by the template): its channels
    // so far (after its <|open|>message ...<|sep|>) go through the splitter first; its tools
    // channel's ids are the start of the reply's.
    size_t start = 0;
    for (size_t i = a.prompt.size(); i-- > 0;)
      if (a.prompt[i] == chat_ids_->eom) {
        start = i + 1;
        break;
      }
    while (start < a.prompt.size() && a.prompt[start] != chat_ids_->sep) ++start;
    for (size_t i = start + 1; i < a.prompt.size(); ++i)
      if (a.split->Push(a.prompt[i]) == ChannelSplitter::Channel::kTools) a.tool_ids.push_back(a.prompt[i]);
  }
  a.queued = true;
  waiting_.push_back(id);
  std::lock_guard<std::mutex> lock(a.job->mu);
  a.job->phase = Job::Phase::kQueued;
  a.job->prompt_ids = a.prompt;
  a.job->cv.notify_all();
}

std::vector<int32_t> Engine::StopIdsFor(const Active& a) const {
  if (a.job->spec.ignore_eos) return {};
  if (a.job->spec.endpoint != Endpoint::kChat) return cfg_.stop_ids;
  return MergeIds(cfg_.stop_ids, {chat_ids_->eom, chat_ids_->eos});
}

// What follows a constrained answer's value: a chat closes the response channel and the
// message as the template renders them; a completion ends with the model's first end id.
// A forced call's arguments close their json segment, the call and the tools channel first.
std::vector<int32_t> Engine::ConstraintEnd(const RequestSpec& spec) const {
  if (spec.endpoint != Endpoint::kChat) return {cfg_.stop_ids.at(0)};  // OnPromptIds refused a model without
  const ChatControlIds& c = *chat_ids_;
  std::vector<int32_t> ids = {c.close};
  auto close = [&](const std::vector<int32_t>& tag) {  // after a <|close|>: TAG <|sep|> <|close|>
    ids.insert(ids.end(), tag.begin(), tag.end());
    ids.insert(ids.end(), {c.sep, c.close});
  };
  if (spec.forced_call.empty()) {
    close(c.response);
  } else {
    close(c.json);
    close(c.call);
    close(c.tools);
  }
  ids.insert(ids.end(), c.message.begin(), c.message.end());
  ids.insert(ids.end(), {c.sep, c.eom});
  return ids;
}

void Engine::Dispatch() {
  while (static_cast<int>(running_.size()) < cfg_.max_batch && !waiting_.empty()) {
    const uint64_t id = waiting_.front();
    Active& a = active_.at(id);
    const RequestSpec& spec = a.job->spec;
    const int64_t room = cfg_.context - static_cast<int64_t>(a.prompt.size());
    cp::Generate g;
    g.request_id = id;
    g.ids = a.prompt;
    g.gen = static_cast<int32_t>(std::min<int64_t>(spec.max_tokens.value_or(room), room));
    g.prefill_chunk = cfg_.prefill_chunk;
    g.stop_ids = StopIdsFor(a);
    g.keep_state = false;  // every request is its own sequence
    g.max_positions = static_cast<int32_t>(std::min<int64_t>(cfg_.context, INT32_MAX));
    g.sampling = spec.sampling;
    g.logprobs = spec.logprobs;
    g.cache_partition = CachePartition(spec.cache_salt);
    // A chat's conversation before its newest message (its preamble, for a first message):
    // a prefix snapshot there serves the next conversation with the same system prompt.
    if (spec.endpoint == Endpoint::kChat) g.snapshot_at = static_cast<int32_t>(BeforeNewestMessage(a.prompt, chat_ids_->eom));
    if (spec.json_schema) g.constraint = cp::Constraint{*spec.json_schema, ConstraintEnd(spec)};
    try {
      ipc::SendMessage(compute_, ipc::Encode(g), {}, "compute");
    } catch (const k3::Error&) {
      return;  // compute not connected yet: the next round tries again
    }
    waiting_.pop_front();
    running_.insert(id);
    a.dispatched = true;
    a.dispatched_at = std::chrono::steady_clock::now();
    metrics_.QueueWait(std::chrono::duration<double>(a.dispatched_at - a.job->arrived).count());
    {
      std::lock_guard<std::mutex> lock(inbox_mu_);
      --pending_;
    }
    std::lock_guard<std::mutex> lock(a.job->mu);
    a.job->phase = Job::Phase::kRunning;
    a.job->cv.notify_all();
  }
}

void Engine::SendCancel(Active& a) {
  if (a.cancel_sent || a.done) return;
  a.cancel_sent = true;
  try {
    ipc::SendMessage(compute_, ipc::Encode(cp::Cancel{a.job->id}), {}, "compute");
  } catch (const k3::Error&) {
    // compute is gone: the launcher ends the run
  }
}

void Engine::CheckClientsGone() {
  std::vector<uint64_t> drop;
  for (auto& [id, a] : active_) {
    if (!a.job->client_gone) continue;
    if (!a.dispatched) drop.push_back(id);
    else SendCancel(a);
  }
  for (uint64_t id : drop) Fail(id, ClientGone(), Outcome::kCancelled);
}

// A request past its queue deadline fails with 503 (its place freed); one past its run deadline
// gets a Cancel and ends as "length" with what it generated; if compute leaves that Cancel
// unanswered as long as a Ping may be (a stopped compute), it fails with 504.
void Engine::CheckDeadlines() {
  const auto now = std::chrono::steady_clock::now();
  std::vector<std::pair<uint64_t, HttpError>> fail;
  for (auto& [id, a] : active_) {
    if (!a.queued) continue;  // still with the tokenizer: tokenizer_timeout's
    if (a.run_timed_out) {
      if (!a.done && now - a.timed_out_at > PongDeadline(cfg_.compute_timeout, longest_step_))
        fail.emplace_back(id, MakeHttpError(504, "compute did not end the request after its run_timeout", "server_error",
                                            "timeout"));
      continue;
    }
    switch (RequestOverdue(cfg_.limits, a.dispatched, a.job->arrived, a.dispatched_at, now)) {
      case Overdue::kNo: break;
      case Overdue::kQueue: {
        char secs[32];
        std::snprintf(secs, sizeof secs, "%g", std::chrono::duration<double>(cfg_.limits.queue_timeout).count());
        fail.emplace_back(id, WithRetryAfter(MakeHttpError(503, std::string("the request waited ") + secs +
                                                                    " s for a place in the batch (queue_timeout); retry later",
                                                                "server_error", "queue_timeout"),
                                             metrics_.MeanRequestSeconds(), cfg_.max_batch));
        break;
      }
      case Overdue::kRun:
        a.run_timed_out = true;
        a.timed_out_at = now;
        SendCancel(a);
        break;
    }
  }
  for (auto& [id, e] : fail) Fail(id, std::move(e), Outcome::kFailed);
}

// One Ping a second while none is unanswered (compute answers between passes); anything from
// compute answers it. Unanswered past PongDeadline: /health 503 until compute is heard again.
void Engine::CheckCompute() {
  const auto now = Clock::now();
  bool compute_ready;
  {
    std::lock_guard<std::mutex> lock(inbox_mu_);
    compute_ready = ready_.count("compute") > 0;
  }
  if (compute_ready && !ping_unanswered_ && now - last_ping_ >= std::chrono::seconds(1)) {
    try {
      ipc::SendMessage(compute_, ipc::Encode(cp::Ping{++ping_nonce_}), {}, "compute");
      ping_unanswered_ = now;
      last_ping_ = now;
    } catch (const k3::Error&) {
      // not connected (yet, or any more): the launcher knows
    }
  }
  const bool stalled = ComputeStalled(ping_unanswered_, now, cfg_.compute_timeout, longest_step_);
  if (stalled != compute_stalled_) {
    compute_stalled_ = stalled;
    UpdateHealth();
  }
}

void Engine::HandleCompute() {
  while (auto r = ipc::ReceiveVerified(compute_, true, ipc::DecodeCompute, Clock::now(), rejects_)) {
    ping_unanswered_.reset();  // whatever compute sends, its loop turns
    if (const auto* t = std::get_if<cp::Token>(&r->message)) {
      const auto it = active_.find(t->request_id);
      if (it == active_.end() || t->index != static_cast<int32_t>(it->second.tokens.size())) continue;
      const auto now = std::chrono::steady_clock::now();
      if (t->index == 0) {
        metrics_.FirstToken(std::chrono::duration<double>(now - it->second.dispatched_at).count());
        it->second.first_token_at = now;
      }
      it->second.last_token_at = now;
      it->second.tokens.push_back(*t);
    } else if (const auto* d = std::get_if<cp::Done>(&r->message)) {
      const auto it = active_.find(d->request_id);
      if (it != active_.end()) it->second.done = *d;
    } else if (const auto* s = std::get_if<cp::Step>(&r->message)) {
      metrics_.OnStep(*s);
      longest_step_ = std::max(longest_step_, s->seconds);
    }
  }
}

}  // namespace k3::server
