#include "services/server/http_api.h"
#include "services/server/request_gate.h"

#include <chrono>
#include <ctime>
#include <memory>

#include "services/server/openai_response.h"
#include "services/server/status_headers.h"
#include "services/server/task_queue.h"

namespace k3::server {
namespace {
using nlohmann::json;

void SendError(httplib::Response& res, const HttpError& e) {
  res.status = e.status;
  for (const auto& [name, value] : e.headers) res.set_header(name, value);
  res.set_content(Dump(ErrorJson(e)), "application/json");
}

// Text for an error status httplib set on its own (no route, body too large, bad request line).
HttpError StatusError(int status, size_t max_body) {
  switch (status) {
    case 404: return {404, "unknown path", "invalid_request_error", "not_found"};
    case 405: return {405, "method not allowed", "invalid_request_error", "method_not_allowed"};
    case 413:
      return {413, "the request body is larger than the limit of " + std::to_string(max_body) + " bytes",
              "invalid_request_error", "payload_too_large"};
    case 429: return {429, "the server is busy; retry later", "rate_limit_error", "server_busy"};
    default: return {status, "bad request", status >= 500 ? "server_error" : "invalid_request_error", ""};
  }
}

// Waits for the job to leave `phase` (or for a deadline); true when it did.
bool WaitPast(Job& j, Job::Phase phase, std::chrono::milliseconds up_to) {
  std::unique_lock<std::mutex> lock(j.mu);
  return j.cv.wait_for(lock, up_to, [&] { return j.phase != phase; });
}

void Complete(const httplib::Request& req, httplib::Response& res, Endpoint endpoint, Engine& engine,
              Metrics& metrics, const HttpConfig& cfg) {
  auto parsed = ParseRequest(req.body, endpoint, cfg.defaults);
  if (auto* e = std::get_if<HttpError>(&parsed)) {
    metrics.Count(Outcome::kInvalid);
    return SendError(res, *e);
  }
  RequestSpec& spec = std::get<RequestSpec>(parsed);
  if (spec.model != cfg.model_name) {
    metrics.Count(Outcome::kInvalid);
    return SendError(res, {404, "the model '" + spec.model + "' does not exist; this server has '" + cfg.model_name + "'",
                           "invalid_request_error", "model_not_found"});
  }
  if (const std::optional<HttpError> e = ApplyMaxTokens(spec, cfg.max_tokens)) {
    metrics.Count(Outcome::kInvalid);
    return SendError(res, *e);
  }
  auto submitted = engine.Submit(std::move(spec));
  if (auto* e = std::get_if<HttpError>(&submitted)) {
    metrics.Count(e->status == 429 ? Outcome::kRejected : Outcome::kFailed);
    return SendError(res, *e);
  }
  std::shared_ptr<Job> job = std::get<std::shared_ptr<Job>>(submitted);
  // Until the prompt is encoded and checked, the answer can still be an error status.
  while (!WaitPast(*job, Job::Phase::kPreparing, std::chrono::milliseconds(200)))
    if (job->client_gone) break;
  {
    std::lock_guard<std::mutex> lock(job->mu);
    if (job->phase == Job::Phase::kFailed) return SendError(res, job->error);
  }
  ResponseIds ids{(endpoint == Endpoint::kChat ? "chatcmpl-" : "cmpl-") + std::to_string(job->id) + "-" +
                      std::to_string(std::chrono::steady_clock::now().time_since_epoch().count() % 1000000007),
                  static_cast<int64_t>(std::time(nullptr)), cfg.model_name};
  const bool stream = job->spec.stream;
  auto finished = std::make_shared<bool>(false);
  auto provider = [job, ids, stream, finished](size_t, httplib::DataSink& sink) {
    std::vector<Delta> all;  // non-streamed: joined at the end
    bool first = true;
    size_t offset = 0;  // completions' text_offset
    auto last_write = std::chrono::steady_clock::now();
    auto write = [&](const std::string& s) {
      last_write = std::chrono::steady_clock::now();
      if (!sink.is_writable() || !sink.write(s.data(), s.size())) {
        job->client_gone = true;
        return false;
      }
      return true;
    };
    auto event = [&](const json& j) { return write("data: " + Dump(j) + "\n\n"); };
    for (;;) {
      std::deque<Delta> deltas;
      Job::Phase phase;
      {
        std::unique_lock<std::mutex> lock(job->mu);
        job->cv.wait_for(lock, std::chrono::milliseconds(100), [&] {
          return !job->deltas.empty() || job->phase == Job::Phase::kFinished || job->phase == Job::Phase::kFailed;
        });
        deltas.swap(job->deltas);
        phase = job->phase;
      }
      for (Delta& d : deltas) {
        if (stream) {
          if (!event(Chunk(ids, *job, &d, first, "", offset))) return false;
          first = false;
          offset += d.content.size();
        } else {
          all.push_back(std::move(d));
        }
      }
      if (phase == Job::Phase::kFinished) {
        std::lock_guard<std::mutex> lock(job->mu);  // the results are final; the engine is done with them
        if (stream) {
          if (first && !event(Chunk(ids, *job, nullptr, true, "", 0))) return false;
          if (!event(Chunk(ids, *job, nullptr, false, job->finish_reason, offset))) return false;
          if (job->spec.include_usage && !event(UsageChunk(ids, *job))) return false;
          if (!write("data: [DONE]\n\n")) return false;
        } else if (!write(Dump(FullResponse(ids, *job, all)))) {
          return false;
        }
        *finished = true;
        sink.done();
        return true;
      }
      if (phase == Job::Phase::kFailed) {
        std::lock_guard<std::mutex> lock(job->mu);
        if (stream) (void)event(ErrorJson(job->error));
        else (void)write(Dump(ErrorJson(job->error)));
        *finished = true;
        sink.done();
        return true;
      }
      // Nothing to say for a second: check the client is still there (SSE comment; JSON whitespace).
      if (std::chrono::steady_clock::now() - last_write > std::chrono::seconds(1) && !write(stream ? ": waiting\n\n" : " "))
        return false;
      if (!sink.is_writable()) {
        job->client_gone = true;
        return false;
      }
    }
  };
  res.status = 200;
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(stream ? "text/event-stream" : "application/json", provider,
                                   [job, finished](bool) {
                                     if (!*finished) job->client_gone = true;  // the connection ended first
                                   });
}

}  // namespace

void InstallRoutes(httplib::Server& svr, Engine& engine, Metrics& metrics, const HttpConfig& cfg) {
  svr.new_task_queue = [threads = cfg.threads] { return new BoundedTaskQueue(static_cast<size_t>(threads)); };
  svr.set_payload_max_length(cfg.max_body_bytes);
  svr.set_keep_alive_max_count(1);  // a kept-alive idle connection would hold a worker thread
  svr.set_read_timeout(10, 0);
  svr.set_write_timeout(5, 0);
  svr.set_pre_routing_handler([&cfg, &metrics](const httplib::Request& req, httplib::Response& res) {
    if (OverloadedThread()) {
      metrics.Count(Outcome::kRejected);
      res.set_header("Connection", "close");
      SendError(res, WithRetryAfter({429, "all " + std::to_string(cfg.threads) + " connection threads are busy; retry later",
                                     "rate_limit_error", "server_busy"},
                                    metrics.MeanRequestSeconds(), cfg.max_batch));
      return httplib::Server::HandlerResponse::Handled;
    }
    const GateRequest g{req.method, req.path, req.get_header_value("Authorization"),
                        req.get_header_value("Content-Type"), req.get_header_value("Host")};
    if (const std::optional<HttpError> e = CheckRequest(g, {cfg.api_key, cfg.allowed_hosts, cfg.port})) {
      SendError(res, *e);
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  svr.set_error_handler(httplib::Server::HandlerWithResponse([&cfg](const httplib::Request&, httplib::Response& res) {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;  // ours, already an error object
    SendError(res, StatusError(res.status, cfg.max_body_bytes));
    return httplib::Server::HandlerResponse::Handled;
  }));
  svr.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "internal error";
    try {
      if (ep) std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = std::string("internal error: ") + e.what();
    } catch (...) {
    }
    SendError(res, {500, what, "server_error", ""});
  });

  auto model_json = [&cfg] {
    return json{{"id", cfg.model_name}, {"object", "model"}, {"created", cfg.created}, {"owned_by", "k3"}};
  };
  svr.Get("/v1/models", [model_json](const httplib::Request&, httplib::Response& res) {
    res.set_content(Dump({{"object", "list"}, {"data", json::array({model_json()})}}), "application/json");
  });
  svr.Get(R"(/v1/models/(.+))", [model_json, &cfg](const httplib::Request& req, httplib::Response& res) {
    if (req.matches[1] != cfg.model_name)
      return SendError(res, {404, "the model '" + std::string(req.matches[1]) + "' does not exist", "invalid_request_error",
                             "model_not_found"});
    res.set_content(Dump(model_json()), "application/json");
  });
  svr.Post("/v1/completions", [&](const httplib::Request& req, httplib::Response& res) {
    Complete(req, res, Endpoint::kCompletions, engine, metrics, cfg);
  });
  svr.Post("/v1/chat/completions", [&](const httplib::Request& req, httplib::Response& res) {
    Complete(req, res, Endpoint::kChat, engine, metrics, cfg);
  });
  svr.Get("/health", [&engine](const httplib::Request&, httplib::Response& res) {
    if (engine.Healthy()) return res.set_content(Dump({{"status", "ok"}}), "application/json");
    res.status = 503;
    res.set_content(Dump(ErrorJson({503, "not ready: waiting for " + engine.NotReady(), "server_error", "unavailable"})),
                    "application/json");
  });
  svr.Get("/metrics", [&metrics](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics.Prometheus(), "text/plain; version=0.0.4");
  });
}

}  // namespace k3::server
