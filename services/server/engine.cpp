// The engine's lifecycle: submission and health (HTTP threads), the launcher's relays on the
// control socket, and the loop that runs every job in turn.
#include "services/server/engine.h"

#include <iostream>

#include "common/ipc/protocol.h"
#include "common/ipc/zmq_channel.h"
#include "services/server/engine_errors.h"
#include "services/server/status_headers.h"

namespace k3::server {
using ipc::Clock;

Engine::Engine(zmq::context_t& ctx, svc::ControlLink& ctl, EngineConfig cfg, Metrics& metrics)
    : ctx_(ctx), ctl_(ctl), cfg_(std::move(cfg)), metrics_(metrics), compute_(ctx, zmq::socket_type::router),
      tok_(ctx, zmq::socket_type::dealer) {
  compute_.set(zmq::sockopt::router_mandatory, 1);
  compute_.set(zmq::sockopt::router_handover, 1);
  compute_.set(zmq::sockopt::linger, 0);
  ipc::BindPrivate(compute_, cfg_.compute);
  tok_.set(zmq::sockopt::linger, 0);
  ipc::Connect(tok_, cfg_.tokenizer);
}

std::string Engine::NotReady() const {
  std::lock_guard<std::mutex> lock(inbox_mu_);
  std::string missing;
  for (const std::string& s : cfg_.services)
    if (!ready_.count(s)) missing += (missing.empty() ? "" : ", ") + s;
  if (missing.empty() && !control_ids_known_) missing = "the tokenizer's chat ids";
  if (missing.empty() && tokenizer_stalled_) missing = "the tokenizer, which has not answered for a while";
  if (missing.empty() && compute_stalled_) missing = "compute, which has not answered for a while";
  return missing;
}

void Engine::UpdateHealth() {
  std::lock_guard<std::mutex> lock(inbox_mu_);
  bool all = control_ids_known_ && !stopping_ && !tokenizer_stalled_ && !compute_stalled_;
  for (const std::string& s : cfg_.services) all = all && ready_.count(s) > 0;
  healthy_ = all;
}

std::variant<std::shared_ptr<Job>, HttpError> Engine::Submit(RequestSpec spec) {
  std::lock_guard<std::mutex> lock(inbox_mu_);
  if (stopping_) return ShuttingDown();
  if (!healthy_)
    return MakeHttpError(503,
                         compute_stalled_     ? "compute has not answered for a while; retry later"
                         : tokenizer_stalled_ ? "the tokenizer has not answered for a while; retry later"
                                              : "the model is still loading",
                         "server_error", "unavailable");
  if (spec.endpoint == Endpoint::kChat && !chat_error_.empty())
    return MakeHttpError(400, chat_error_, "invalid_request_error", "chat_unsupported");
  if (pending_ >= cfg_.queue_size)
    return WithRetryAfter(MakeHttpError(429, "the request queue is full (" + std::to_string(cfg_.queue_size) +
                                             " waiting); retry later", "rate_limit_error", "queue_full"),
                          metrics_.MeanRequestSeconds(), cfg_.max_batch);
  ++pending_;
  auto job = std::make_shared<Job>(next_job_++, std::move(spec));
  inbox_.push_back(job);
  return job;
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
      if (rd->service == "tokenizer") tok_requests_.Restarted();
      UpdateHealth();
    } else if (const auto* st = std::get_if<ipc::control::Stats>(&r->message)) {
      metrics_.OnServiceStats(st->service, st->stats);
    } else {
      ++ctl_.rejects().rejected;
      ctl_.rejects().last_reason = "unexpected control message from the launcher";
    }
  }
}

void Engine::Run(const std::function<void()>& stop_http) {
  AskControlIds();
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
    CheckDeadlines();
    Dispatch();
    CheckCompute();
    tok_requests_.ResendStale(Clock::now());
    CheckTokenizerDeadlines();
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
  for (uint64_t id : ids) Fail(id, ShuttingDown(), Outcome::kFailed);
  stop_http();
}

}  // namespace k3::server
