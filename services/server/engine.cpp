#include "services/server/engine.h"

#include <algorithm>
#include <iostream>

#include "common/end_ids.h"
#include "common/ipc/protocol.h"
#include "common/ipc/zmq_channel.h"

namespace k3::server {
namespace cp = ipc::compute;
namespace tk = ipc::tokenizer;
using ipc::Clock;
using Channel = ChannelSplitter::Channel;

namespace {

constexpr auto kTokenizerResend = std::chrono::seconds(5);  // a restarted tokenizer lost what it held
// The control tokens and tag names chat needs (launcher/chat.cpp asks the same).
const char* const kSpecialNames[] = {"<|open|>", "<|close|>", "<|sep|>", "<|end_of_msg|>", "[EOS]"};
const char* const kTagNames[] = {"think", "response"};

HttpError Error(int status, std::string message, std::string type, std::string code = {}) {
  return HttpError{status, std::move(message), std::move(type), std::move(code)};
}

}  // namespace

Engine::Engine(zmq::context_t& ctx, svc::ControlLink& ctl, EngineConfig cfg, Metrics& metrics)
    : ctx_(ctx), ctl_(ctl), cfg_(std::move(cfg)), metrics_(metrics), compute_(ctx, zmq::socket_type::router),
      tok_(ctx, zmq::socket_type::dealer) {
  compute_.set(zmq::sockopt::router_mandatory, 1);
  compute_.set(zmq::sockopt::router_handover, 1);
  compute_.set(zmq::sockopt::linger, 0);
  ipc::BindPrivate(compute_, cfg_.compute);
  tok_.set(zmq::sockopt::linger, 0);
  tok_.connect(cfg_.tokenizer);
}

std::string Engine::NotReady() const {
  std::lock_guard<std::mutex> lock(inbox_mu_);
  std::string missing;
  for (const std::string& s : cfg_.services)
    if (!ready_.count(s)) missing += (missing.empty() ? "" : ", ") + s;
  if (missing.empty() && !control_ids_known_) missing = "the tokenizer's chat ids";
  return missing;
}

void Engine::UpdateHealth() {
  std::lock_guard<std::mutex> lock(inbox_mu_);
  bool all = control_ids_known_ && !stopping_;
  for (const std::string& s : cfg_.services) all = all && ready_.count(s) > 0;
  healthy_ = all;
}

std::variant<std::shared_ptr<Job>, HttpError> Engine::Submit(RequestSpec spec) {
  std::lock_guard<std::mutex> lock(inbox_mu_);
  if (stopping_) return Error(503, "the server is shutting down", "server_error", "unavailable");
  if (!healthy_) return Error(503, "the model is still loading", "server_error", "unavailable");
  if (spec.endpoint == Endpoint::kChat && !chat_error_.empty())
    return Error(400, chat_error_, "invalid_request_error", "chat_unsupported");
  if (pending_ >= cfg_.queue_size)
    return Error(429, "the request queue is full (" + std::to_string(cfg_.queue_size) + " waiting); retry later",
                 "rate_limit_error", "queue_full");
  ++pending_;
  auto job = std::make_shared<Job>(next_job_++, std::move(spec));
  inbox_.push_back(job);
  return job;
}

void Engine::SendTokenizer(uint64_t id, TokPending p) {
  p.sent = Clock::now();
  ipc::SendMessage(tok_, p.msg);
  tok_pending_[id] = std::move(p);
}

void Engine::ResendTokenizer(bool all) {
  const auto now = Clock::now();
  for (auto& [id, p] : tok_pending_)
    if (all || now - p.sent > kTokenizerResend) {
      p.sent = now;
      ipc::SendMessage(tok_, p.msg);
    }
}

void Engine::HandleControl() {
  while (auto r = ipc::ReceiveVerified(ctl_.socket(), false, ipc::DecodeControl, Clock::now(), ctl_.rejects())) {
    if (const auto* s = std::get_if<ipc::control::Shutdown>(&r->message)) {
      std::cerr << "[server] shutdown: " << s->reason << "\n";
      shutdown_ = true;
    } else if (const auto* rd = std::get_if<ipc::control::Ready>(&r->message)) {
      // Relayed by the launcher: another service is up (again).
      {
        std::lock_guard<std::mutex> lock(inbox_mu_);
        ready_.insert(rd->service);
      }
      if (rd->service == "tokenizer") ResendTokenizer(true);
      UpdateHealth();
    } else if (const auto* st = std::get_if<ipc::control::Stats>(&r->message)) {
      metrics_.OnServiceStats(st->service, st->stats);
    } else {
      ++ctl_.rejects().rejected;
      ctl_.rejects().last_reason = "unexpected control message from the launcher";
    }
  }
}

void Engine::OnControlIds(const std::string& name, const std::vector<int32_t>& ids, const std::string& failure) {
  if (!failure.empty()) {
    std::lock_guard<std::mutex> lock(inbox_mu_);
    if (chat_error_.empty()) chat_error_ = "this model's tokenizer cannot chat: " + name + ": " + failure;
  }
  control_answers_[name] = ids;
  if (control_answers_.size() < std::size(kSpecialNames) + std::size(kTagNames)) return;
  ChatControlIds c;
  auto one = [&](const char* n, int32_t& out) {
    const std::vector<int32_t>& v = control_answers_[n];
    if (v.size() == 1 && v[0] >= 0 && v[0] < cfg_.vocab) out = v[0];
    else {
      std::lock_guard<std::mutex> lock(inbox_mu_);
      if (chat_error_.empty()) chat_error_ = std::string("this model's tokenizer has no special token ") + n + ": not a K3 chat vocabulary";
    }
  };
  one("<|open|>", c.open);
  one("<|close|>", c.close);
  one("<|sep|>", c.sep);
  one("<|end_of_msg|>", c.eom);
  one("[EOS]", c.eos);
  c.think = control_answers_["think"];
  c.response = control_answers_["response"];
  {
    std::lock_guard<std::mutex> lock(inbox_mu_);
    if (chat_error_.empty()) chat_ids_ = c;
    control_ids_known_ = true;
  }
  if (!chat_error_.empty()) std::cerr << "[server] /v1/chat/completions is off: " << chat_error_ << "\n";
  UpdateHealth();
}

void Engine::HandleTokenizer() {
  while (auto r = ipc::ReceiveVerified(tok_, false, ipc::DecodeTokenizer, Clock::now(), rejects_)) {
    const uint64_t id = std::visit([](const auto& m) { return m.request_id; }, r->message);
    const auto it = tok_pending_.find(id);
    if (it == tok_pending_.end()) continue;  // answered already (a resend's second reply)
    TokPending p = std::move(it->second);
    tok_pending_.erase(it);
    const auto* ids = std::get_if<tk::EncodedIds>(&r->message);
    const auto* dec = std::get_if<tk::Decoded>(&r->message);
    const auto* failed = std::get_if<tk::Failed>(&r->message);
    switch (p.kind) {
      case TokKind::kControl:
        OnControlIds(p.name, ids ? ids->ids : std::vector<int32_t>{}, failed ? failed->detail : ids ? "" : "no ids");
        break;
      case TokKind::kPrompt:
        if (ids) OnPromptIds(p.job, ids->ids);
        else if (active_.count(p.job))
          Fail(p.job,
               Error(400, std::string(active_.at(p.job).job->spec.endpoint == Endpoint::kChat ? "cannot render the conversation: "
                                                                                               : "cannot encode the prompt: ") +
                              (failed ? failed->detail : "unexpected tokenizer reply"),
                     "invalid_request_error", "invalid_prompt"),
               Outcome::kInvalid);
        break;
      case TokKind::kDecode:
        decoding_.erase(p.id);
        bytes_[p.id] = dec ? dec->text : std::string();  // an id the tokenizer cannot decode shows as nothing
        break;
    }
  }
}

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
    if (spec.prompt_ids) {
      OnPromptIds(id, *spec.prompt_ids);
      continue;
    }
    const uint64_t tid = next_tok_++;
    TokPending p{TokKind::kPrompt, id, -1, {}, {}, {}};
    p.msg = spec.endpoint == Endpoint::kChat
                ? ipc::Encode(tk::RenderChat{tid, HistoryJsonl(spec.messages), spec.thinking, spec.effort})
                : ipc::Encode(tk::Encode{tid, spec.prompt_text, false});
    SendTokenizer(tid, std::move(p));
  }
}

void Engine::OnPromptIds(uint64_t id, std::vector<int32_t> ids) {
  const auto it = active_.find(id);
  if (it == active_.end()) return;  // the client went away meanwhile
  Active& a = it->second;
  if (ids.empty()) return Fail(id, Error(400, "the prompt encodes to no tokens", "invalid_request_error", "invalid_prompt"), Outcome::kInvalid);
  for (int32_t t : ids)
    if (t < 0 || t >= cfg_.vocab)
      return Fail(id, Error(400, "prompt token id " + std::to_string(t) + " is outside the vocabulary [0, " + std::to_string(cfg_.vocab) + ")",
                            "invalid_request_error", "invalid_prompt"),
                  Outcome::kInvalid);
  if (static_cast<int64_t>(ids.size()) >= cfg_.context)
    return Fail(id, Error(400, "the prompt has " + std::to_string(ids.size()) + " tokens but the context is " +
                                   std::to_string(cfg_.context) + ": no room to generate",
                          "invalid_request_error", "context_length_exceeded"),
                Outcome::kInvalid);
  a.prompt = std::move(ids);
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
    try {
      ipc::SendMessage(compute_, ipc::Encode(g), {}, "compute");
    } catch (const k3::Error&) {
      return;  // compute not connected yet: the next round tries again
    }
    waiting_.pop_front();
    running_.insert(id);
    a.dispatched = true;
    {
      std::lock_guard<std::mutex> lock(inbox_mu_);
      --pending_;
    }
    std::lock_guard<std::mutex> lock(a.job->mu);
    a.job->phase = Job::Phase::kRunning;
    a.job->cv.notify_all();
  }
}

void Engine::CheckClientsGone() {
  std::vector<uint64_t> drop;
  for (auto& [id, a] : active_) {
    if (!a.job->client_gone) continue;
    if (!a.dispatched) {
      drop.push_back(id);
    } else if (!a.cancel_sent && !a.done) {
      a.cancel_sent = true;
      try {
        ipc::SendMessage(compute_, ipc::Encode(cp::Cancel{id}), {}, "compute");
      } catch (const k3::Error&) {
        // compute is gone: the launcher ends the run
      }
    }
  }
  for (uint64_t id : drop) Fail(id, Error(499, "the client went away", "invalid_request_error"), Outcome::kCancelled);
}

void Engine::HandleCompute() {
  while (auto r = ipc::ReceiveVerified(compute_, true, ipc::DecodeCompute, Clock::now(), rejects_)) {
    if (const auto* t = std::get_if<cp::Token>(&r->message)) {
      const auto it = active_.find(t->request_id);
      if (it == active_.end() || t->index != static_cast<int32_t>(it->second.tokens.size())) continue;
      it->second.tokens.push_back(*t);
    } else if (const auto* d = std::get_if<cp::Done>(&r->message)) {
      const auto it = active_.find(d->request_id);
      if (it != active_.end()) it->second.done = *d;
    } else if (const auto* s = std::get_if<cp::Step>(&r->message)) {
      metrics_.OnStep(*s);
    }
  }
}

bool Engine::HaveBytes(int32_t id) {
  if (bytes_.count(id)) return true;
  if (decoding_.insert(id).second) {
    const uint64_t tid = next_tok_++;
    TokPending p{TokKind::kDecode, 0, id, {}, ipc::Encode(tk::Decode{tid, {id}, false, false}), {}};
    SendTokenizer(tid, std::move(p));
  }
  return false;
}

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
    if (!ends && ch != Channel::kNone) {
      a.raw[static_cast<size_t>(ch)] += bytes_[t.id];
      if (ch == Channel::kThink) ++a.reasoning_tokens;
      if (ch == Channel::kResponse && a.job->spec.logprobs >= 0) {
        TokenLogprob lp{bytes_[t.id], t.logprob, {}};
        for (const cp::TopLogprob& alt : t.top) lp.top.emplace_back(bytes_[alt.id], alt.logprob);
        d.logprobs.push_back(std::move(lp));
      }
    }
    ++a.processed;
    show(false);
  }
  if (a.stop_matched && !a.cancel_sent && !a.done) {
    a.cancel_sent = true;
    try {
      ipc::SendMessage(compute_, ipc::Encode(cp::Cancel{a.job->id}), {}, "compute");
    } catch (const k3::Error&) {
      // compute is gone: the launcher ends the run
    }
  }
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
  if (done.reason == cp::StopReason::kInterrupted)
    return Fail(id, Error(503, "the server is shutting down", "server_error", "unavailable"), Outcome::kFailed);
  if (done.reason == cp::StopReason::kCancelled && !a.stop_matched)
    return Fail(id, Error(499, "the client went away", "invalid_request_error"), Outcome::kCancelled);
  metrics_.Count(Outcome::kCompleted);
  metrics_.Tokens(static_cast<int64_t>(a.prompt.size()), done.stats.generated_tokens, done.stats.cached_tokens);
  {
    std::lock_guard<std::mutex> lock(a.job->mu);
    Job& j = *a.job;
    j.phase = Job::Phase::kFinished;
    j.finish_reason = a.stop_matched || done.reason == cp::StopReason::kStopId ? "stop" : "length";
    j.prompt_tokens = static_cast<int64_t>(a.prompt.size());
    j.completion_tokens = done.stats.generated_tokens;
    j.cached_tokens = done.stats.cached_tokens;
    j.reasoning_tokens = a.reasoning_tokens;
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

void Engine::Run(const std::function<void()>& stop_http) {
  // The chat template's control ids, asked once (chat is refused without them).
  for (const char* n : kSpecialNames) {
    const uint64_t tid = next_tok_++;
    SendTokenizer(tid, TokPending{TokKind::kControl, 0, -1, n, ipc::Encode(tk::Encode{tid, n, true}), {}});
  }
  for (const char* n : kTagNames) {
    const uint64_t tid = next_tok_++;
    SendTokenizer(tid, TokPending{TokKind::kControl, 0, -1, n, ipc::Encode(tk::Encode{tid, n, false}), {}});
  }
  while (!shutdown_ && !svc::StopRequested()) {
    zmq::pollitem_t items[] = {{ctl_.socket().handle(), 0, ZMQ_POLLIN, 0},
                               {compute_.handle(), 0, ZMQ_POLLIN, 0},
                               {tok_.handle(), 0, ZMQ_POLLIN, 0}};
    ipc::Poll(items, 3, std::chrono::milliseconds(10));
    HandleControl();
    HandleCompute();
    HandleTokenizer();
    TakeSubmitted();
    CheckClientsGone();
    Dispatch();
    ResendTokenizer(false);
    std::vector<uint64_t> ids;
    for (const auto& [id, a] : active_)
      if (a.dispatched) ids.push_back(id);
    for (uint64_t id : ids) Process(active_.at(id));
    metrics_.Load(static_cast<int64_t>(waiting_.size()), static_cast<int64_t>(running_.size()));
  }
  {
    std::lock_guard<std::mutex> lock(inbox_mu_);
    stopping_ = true;
    healthy_ = false;
  }
  TakeSubmitted();
  std::vector<uint64_t> ids;
  for (const auto& [id, a] : active_) ids.push_back(id);
  for (uint64_t id : ids) Fail(id, Error(503, "the server is shutting down", "server_error", "unavailable"), Outcome::kFailed);
  stop_http();
}

}  // namespace k3::server
