#include "services/server/http_api.h"
#include "services/server/request_gate.h"

#include <algorithm>
#include <chrono>
#include <ctime>
#include <initializer_list>
#include <memory>

#include "services/server/body_limits.h"
#include "services/server/client_socket.h"
#include "services/server/engine_errors.h"
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

// Waits for the job to leave every phase in `phases`, watching the client: one that goes away
// meanwhile (its socket closed; nothing is written to it) marks the job client_gone. True when
// the job moved on, false when the client went away.
bool WaitWatching(Job& j, std::initializer_list<Job::Phase> phases, int client_fd) {
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(j.mu);
      const auto moved = [&] { return std::find(phases.begin(), phases.end(), j.phase) == phases.end(); };
      if (j.cv.wait_for(lock, std::chrono::milliseconds(100), moved)) return true;
    }
    if (PeerClosed(client_fd)) {
      j.client_gone = true;
      return false;
    }
  }
}

void Complete(const httplib::Request& req, const std::string& body, httplib::Response& res, Endpoint endpoint,
              Engine& engine, Metrics& metrics, const HttpConfig& cfg) {
  auto parsed = ParseRequest(body, endpoint, cfg.defaults, RequestJsonLimits(body.size()));
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
  const int client_fd = FindConnectionSocket({req.local_addr, req.remote_addr, req.local_port, req.remote_port});
  const bool stream = job->spec.stream;
  // Until the prompt is encoded and checked (non-streamed: until the end) the answer can still
  // be an error status.
  using P = Job::Phase;
  if (!WaitWatching(*job, stream ? std::initializer_list<P>{P::kPreparing}
                                 : std::initializer_list<P>{P::kPreparing, P::kQueued, P::kRunning},
                    client_fd))
    return SendError(res, ClientGone());
  ResponseIds ids{(endpoint == Endpoint::kChat ? "chatcmpl-" : "cmpl-") + std::to_string(job->id) + "-" +
                      std::to_string(std::chrono::steady_clock::now().time_since_epoch().count() % 1000000007),
                  static_cast<int64_t>(std::time(nullptr)), cfg.model_name};
  {
    std::lock_guard<std::mutex> lock(job->mu);
    if (job->phase == P::kFailed) return SendError(res, job->error);
    if (!stream) {  // finished: one JSON answer with its length
      std::vector<Delta> all(std::make_move_iterator(job->deltas.begin()), std::make_move_iterator(job->deltas.end()));
      return res.set_content(Dump(FullResponse(ids, *job, all)), "application/json");
    }
  }
  auto finished = std::make_shared<bool>(false);
  auto provider = [job, ids, finished](size_t, httplib::DataSink& sink) {
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
        if (!event(Chunk(ids, *job, &d, first, "", offset))) return false;
        first = false;
        offset += d.content.size();
      }
      if (phase == Job::Phase::kFinished) {
        std::lock_guard<std::mutex> lock(job->mu);  // the results are final; the engine is done with them
        if (first && !event(Chunk(ids, *job, nullptr, true, "", 0))) return false;
        if (!event(Chunk(ids, *job, nullptr, false, job->finish_reason, offset))) return false;
        if (job->spec.include_usage && !event(UsageChunk(ids, *job))) return false;
        if (!write("data: [DONE]\n\n")) return false;
        *finished = true;
        sink.done();
        return true;
      }
      if (phase == Job::Phase::kFailed) {
        std::lock_guard<std::mutex> lock(job->mu);
        (void)event(ErrorJson(job->error));
        *finished = true;
        sink.done();
        return true;
      }
      // Nothing to say for a second: check the client is still there (an SSE comment).
      if (std::chrono::steady_clock::now() - last_write > std::chrono::seconds(1) && !write(": waiting\n\n"))
        return false;
      if (!sink.is_writable()) {
        job->client_gone = true;
        return false;
      }
    }
  };
  res.status = 200;
  res.set_header("Cache-Control", "no-cache");
  auto released = [job, finished](bool) {
    if (!*finished) job->client_gone = true;  // the connection ended first
  };
  // HTTP/1.0 has no chunked encoding: the stream ends when the connection closes.
  if (req.version == "HTTP/1.0") res.set_content_provider("text/event-stream", provider, released);
  else res.set_chunked_content_provider("text/event-stream", provider, released);
}

// A body read through httplib's content reader, held to max_body_bytes however it is framed
// (httplib 0.11 bounds only a Content-Length body itself). False: `res` holds the error.
bool ReadBody(const httplib::ContentReader& reader, httplib::Response& res, const HttpConfig& cfg, std::string& body) {
  BoundedBody bounded(cfg.max_body_bytes, BoundedBody::Clock::now() + kBodyTimeout);
  const bool read = reader([&](const char* data, size_t n) { return bounded.Add(data, n, BoundedBody::Clock::now()); });
  if (read) {
    body = std::move(bounded.text());
    return true;
  }
  res.set_header("Connection", "close");  // the rest of the body is never read
  if (bounded.late())
    SendError(res, {408, "the request body did not arrive within " + std::to_string(kBodyTimeout.count()) + " s",
                    "invalid_request_error", "timeout"});
  else if (bounded.over() || res.status == 413) SendError(res, StatusError(413, cfg.max_body_bytes));
  else SendError(res, {400, "the request body could not be read (malformed framing or a timeout)", "invalid_request_error", ""});
  return false;
}

}  // namespace

void InstallRoutes(httplib::Server& svr, Engine& engine, Metrics& metrics, const HttpConfig& cfg) {
  svr.new_task_queue = [threads = cfg.threads, port = cfg.port] {
    return new BoundedTaskQueue(static_cast<size_t>(threads), GateLimits{port});
  };
  svr.set_payload_max_length(cfg.max_body_bytes);
  svr.set_keep_alive_max_count(1);  // a kept-alive idle connection would hold a worker thread
  svr.set_read_timeout(10, 0);
  svr.set_write_timeout(5, 0);
  svr.set_pre_routing_handler([&cfg, &metrics](const httplib::Request& req, httplib::Response& res) {
    // /health and /metrics are answered even on the overflow thread: a monitor must see a
    // server that is busy, not a refusal.
    if (OverloadedThread() && req.path != "/health" && req.path != "/metrics") {
      metrics.Count(Outcome::kRejected);
      res.set_header("Connection", "close");
      SendError(res, WithRetryAfter({429, "all " + std::to_string(cfg.threads) + " connection threads are busy; retry later",
                                     "rate_limit_error", "server_busy"},
                                    metrics.MeanRequestSeconds(), cfg.max_batch));
      return httplib::Server::HandlerResponse::Handled;
    }
    // A declared length over the limit is refused before its body: httplib would read it all
    // (to skip it) however slowly it came.
    if (req.has_header("Content-Length") &&
        req.get_header_value<uint64_t>("Content-Length") > static_cast<uint64_t>(cfg.max_body_bytes)) {
      res.set_header("Connection", "close");
      SendError(res, StatusError(413, cfg.max_body_bytes));
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
  // Content-reader handlers: the body is read here, bounded (ReadBody), not by httplib whole.
  for (const auto& [path, endpoint] : {std::pair{"/v1/completions", Endpoint::kCompletions},
                                       std::pair{"/v1/chat/completions", Endpoint::kChat}})
    svr.Post(path, [&, endpoint = endpoint](const httplib::Request& req, httplib::Response& res,
                                             const httplib::ContentReader& reader) {
      std::string body;
      if (ReadBody(reader, res, cfg, body)) Complete(req, body, res, endpoint, engine, metrics, cfg);
    });
  // Any other POST: answered without reading its body (httplib would read a chunked one whole).
  svr.Post(".*", [](const httplib::Request&, httplib::Response& res, const httplib::ContentReader&) {
    res.set_header("Connection", "close");
    SendError(res, StatusError(404, 0));
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
