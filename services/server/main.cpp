// k3-server: the OpenAI-compatible HTTP front of a k3 run (docs/server.md). Started by
// `k3-launch CONFIG --serve HOST:PORT` with everything on its command line; it joins the
// control channel like every service (Hello, Ready once it listens, Shutdown), binds the compute
// endpoint k3-compute connects to, and asks the tokenizer service to encode, render and decode.
//
//     k3-server --control EP --compute EP --tokenizer EP --listen 127.0.0.1:8080
//         --model-name k3-demo-tiny --vocab-size N [--context N] [--max-batch N] [...]
//
// A non-loopback --listen needs --api-key (or K3_API_KEY) unless --insecure, the rule of
// k3-expert-server.
#include <CLI/CLI.hpp>
#include <httplib.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <exception>
#include <iostream>
#include <thread>

#include "common/cli_parse.h"
#include "common/error.h"
#include "common/id_list.h"
#include "common/loopback.h"
#include "common/option_limits.h"
#include "common/process_init.h"
#include "common/run_main.h"
#include "common/sampling_check.h"
#include "common/sampling_flags.h"
#include "common/service/service_shell.h"
#include "services/server/engine.h"
#include "services/server/http_api.h"
#include "services/server/request_gate.h"

namespace {
using namespace k3;

struct Flags {
  std::string control, compute, tokenizer, listen, stop_ids, wait_for;
  std::string bind_address;  // --listen's host resolved once: the address checked is the one bound
  std::string allowed_hosts;  // --allowed-hosts, comma separated ("" = the defaults)
  server::EngineConfig engine;
  server::HttpConfig http;
  bool insecure = false, no_think = false;
  int64_t max_body_bytes = 1 << 20;
  double tokenizer_timeout = 30, compute_timeout = 900, queue_timeout = 3600, run_timeout = 0;
};

// "HOST:PORT" or "[V6]:PORT" -> host, port.
std::pair<std::string, int> SplitListen(const std::string& s) {
  const size_t colon = s.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == s.size())
    throw UsageError("--listen '" + s + "': want HOST:PORT");
  std::string host = s.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  const std::string port = s.substr(colon + 1);
  char* end = nullptr;
  const long p = std::strtol(port.c_str(), &end, 10);
  if (*end != '\0' || p < 0 || p > 65535) throw UsageError("--listen '" + s + "': the port must be 0 to 65535");
  return {host, static_cast<int>(p)};
}

// The service the shell's RunServiceLifecycle drives (common/service/service_shell.h): Ready
// once the HTTP port is bound (its stat "port" is the one bound, for --listen HOST:0); no final
// Stats (the launcher gets compute's).
class Server {
 public:
  Server(const Flags& f, zmq::context_t& ctx, svc::ControlLink& ctl)
      : f_(f), listen_(SplitListen(f.listen)), http_(f.http), engine_(ctx, ctl, f.engine, metrics_) {}

  void Start() {
    const int port = listen_.second;
    const std::string& host = f_.bind_address;
    bound_ = port;
    int listen_fd = -1;
    svr_.set_socket_options([&listen_fd](socket_t s) {
      httplib::default_socket_options(s);
      listen_fd = s;
    });
    if (port == 0) bound_ = svr_.bind_to_any_port(host);
    else if (!svr_.bind_to_port(host, port)) bound_ = -1;
    if (bound_ <= 0) throw RuntimeFailure("cannot listen on " + f_.listen + ": " + std::strerror(errno));
    // httplib 0.11 listens with a backlog of 5, so a burst of connections is refused by the
    // kernel; Linux lets a second listen() on the socket raise it.
    svr_.set_socket_options(httplib::default_socket_options);  // listen_fd is local
    if (listen_fd >= 0 && ::listen(listen_fd, server::kListenBacklog) != 0)
      throw RuntimeFailure("cannot listen on " + f_.listen + ": " + std::strerror(errno));
    http_.port = bound_;
    server::InstallRoutes(svr_, engine_, metrics_, http_);
    std::cerr << "[server] listening on http://" << (host.find(':') != std::string::npos ? "[" + host + "]" : host)
              << ":" << bound_ << " as model '" << f_.http.model_name << "' (max_batch " << f_.engine.max_batch
              << ", queue " << f_.engine.queue_size << ", " << f_.http.threads << " connection threads)\n";
  }

  std::vector<ipc::control::Stat> StartStats() const { return {{"port", static_cast<double>(bound_)}}; }

  // Until a Shutdown or a stop signal (the engine's loop sees them and stops the HTTP server).
  // From here until Serve returns, the engine thread alone uses the control socket.
  void Serve() {
    std::atomic<bool> listen_over{false};
    std::exception_ptr engine_error;
    std::thread engine_thread([&] {
      auto stop_http = [&] {
        while (!svr_.is_running() && !listen_over) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        svr_.stop();
      };
      try {
        engine_.Run(stop_http);
      } catch (...) {
        engine_error = std::current_exception();
        stop_http();
      }
    });
    svr_.listen_after_bind();
    listen_over = true;
    engine_thread.join();
    if (engine_error) std::rethrow_exception(engine_error);
  }

  void Finish() {}
  std::vector<ipc::control::Stat> FinalStats() const { return {}; }

 private:
  const Flags& f_;
  std::pair<std::string, int> listen_;
  server::HttpConfig http_;  // f.http with the bound port
  server::Metrics metrics_;  // before engine_, which counts into it
  server::Engine engine_;
  httplib::Server svr_;
  int bound_ = -1;
};

int Main(int argc, char** argv) {
  Flags f;
  CLI::App app{"k3-server: OpenAI-compatible HTTP server of a k3 run (started by k3-launch --serve)"};
  app.add_option("--control", f.control, "the launcher's control endpoint")->required();
  app.add_option("--compute", f.compute, "the compute endpoint to bind (k3-compute connects to it)")->required();
  app.add_option("--tokenizer", f.tokenizer, "the tokenizer service's endpoint")->required();
  app.add_option("--listen", f.listen, "HTTP address HOST:PORT (port 0: any free port)")->required();
  app.add_option("--model-name", f.http.model_name, "the model id clients name (served_model_name)")->required();
  app.add_option("--vocab-size", f.engine.vocab, "the model's vocabulary size")->required();
  app.add_option("--context", f.engine.context, "positions per sequence (prompt + generated), as planned");
  app.add_option("--max-batch", f.engine.max_batch, "requests compute runs at once (default 1)");
  app.add_option("--queue-size", f.engine.queue_size, "requests that may wait for a place in the batch (default 16)");
  app.add_option("--threads", f.http.threads,
                 "HTTP connection threads (default 8); a connection beyond them is answered 429");
  app.add_option("--max-body-bytes", f.max_body_bytes, "largest request body, bytes (default 1 MiB); larger: 413");
  app.add_option("--max-tokens-default", f.http.max_tokens.default_tokens,
                 "generated tokens for a request without max_tokens (0: the limit, or up to the context)");
  app.add_option("--max-tokens-limit", f.http.max_tokens.limit,
                 "the most generated tokens a request may ask for; more: 400 (0: no limit)");
  app.add_option("--tokenizer-timeout", f.tokenizer_timeout,
                 "seconds a prompt may wait for the tokenizer (default 30); then 504, and /health 503 until it answers");
  app.add_option("--compute-timeout", f.compute_timeout,
                 "seconds compute may leave a liveness ping unanswered (at least 4x its longest pass; default 900); "
                 "then /health is 503 until it answers");
  app.add_option("--queue-timeout", f.queue_timeout,
                 "seconds a request may wait for a place in the batch (default 3600; 0: none); then 503 with Retry-After");
  app.add_option("--run-timeout", f.run_timeout,
                 "seconds a request may run in compute (default 0: none); then it ends with what it generated, "
                 "finish_reason length");
  app.add_option("--prefill-chunk", f.engine.prefill_chunk, "prompt tokens per forward chunk (0: compute's default)");
  app.add_option("--stop-ids", f.stop_ids, "ids that end every generation (the model's end ids), comma separated");
  app.add_option("--wait-for", f.wait_for, "services whose Ready /health waits for, comma separated");
  app.add_option("--api-key", f.http.api_key,
                 "clients must send 'Authorization: Bearer KEY' (default: $K3_API_KEY; none: no key)");
  app.add_flag("--insecure", f.insecure, "allow a non-loopback --listen without --api-key");
  app.add_option("--allowed-hosts", f.allowed_hosts,
                 "without --api-key: the Host names clients may use, comma separated, * for any (default: the "
                 "--listen host, its address, localhost, 127.0.0.1, ::1); others get 403");
  ipc::compute::Sampling& s = f.http.defaults.sampling;  // the defaults of requests that give none
  AddSamplingParamFlags(app, s);
  app.add_flag("--no-think", f.no_think, "chat: no reasoning channel unless a request asks for one");
  app.add_option("--thinking-effort", f.http.defaults.effort, "chat: default thinking effort low, high or max");
  if (!ParseCommandLine(app, argc, argv, "k3-server")) return kExitOk;
  if (f.http.api_key.empty())
    if (const char* k = std::getenv("K3_API_KEY")) f.http.api_key = k;
  const auto [host, port] = SplitListen(f.listen);
  (void)port;
  if (!f.http.api_key.empty() && f.insecure) throw UsageError("--insecure and --api-key exclude each other");
  // The name is resolved here, once, and the server binds the numeric address that was checked:
  // a name cannot pass the check as loopback and then be bound elsewhere.
  const std::vector<std::string> addrs = ResolveHost(host);
  if (addrs.empty()) throw UsageError("--listen " + f.listen + ": " + host + " does not resolve to an address");
  f.bind_address = addrs.front();
  if (f.http.api_key.empty() && !f.insecure && !IsLoopbackAddress(f.bind_address))
    throw UsageError(f.listen + " is reachable from other machines (" + f.bind_address +
                     "): pass --api-key, or --insecure");
  if (f.engine.max_batch < 1 || f.engine.max_batch > limits::kMaxBatch)
    throw UsageError("--max-batch must be 1 to " + std::to_string(limits::kMaxBatch));
  if (f.engine.queue_size < 0 || f.engine.queue_size > 1 << 20) throw UsageError("--queue-size must be 0 to 1048576");
  if (f.http.threads < 1 || f.http.threads > 4096) throw UsageError("--threads must be 1 to 4096");
  if (f.max_body_bytes < 1024) throw UsageError("--max-body-bytes must be at least 1024");
  if (!(f.tokenizer_timeout >= 0.1 && f.tokenizer_timeout <= 86400))
    throw UsageError("--tokenizer-timeout must be 0.1 to 86400 seconds");
  f.engine.tokenizer_timeout = std::chrono::milliseconds(static_cast<int64_t>(f.tokenizer_timeout * 1000));
  if (!(f.compute_timeout >= 0.1 && f.compute_timeout <= 86400))
    throw UsageError("--compute-timeout must be 0.1 to 86400 seconds");
  if (!(f.queue_timeout >= 0 && f.queue_timeout <= 604800)) throw UsageError("--queue-timeout must be 0 to 604800 seconds");
  if (!(f.run_timeout >= 0 && f.run_timeout <= 604800)) throw UsageError("--run-timeout must be 0 to 604800 seconds");
  auto ms = [](double secs) { return std::chrono::milliseconds(static_cast<int64_t>(secs * 1000)); };
  f.engine.compute_timeout = ms(f.compute_timeout);
  f.engine.limits = {ms(f.queue_timeout), ms(f.run_timeout)};
  if (f.engine.context < 2) throw UsageError("--context must be at least 2");
  if (f.engine.vocab < 1) throw UsageError("--vocab-size must be positive");
  if (const std::string bad = MaxTokensPolicyProblem(f.http.max_tokens); !bad.empty()) throw UsageError(bad);
  if (const std::string bad = SamplingProblem(s, -1); !bad.empty()) throw UsageError(bad);
  if (f.http.defaults.effort != "low" && f.http.defaults.effort != "high" && f.http.defaults.effort != "max")
    throw UsageError("--thinking-effort: '" + f.http.defaults.effort + "' is not low, high or max");
  f.http.defaults.thinking = !f.no_think;
  f.http.max_body_bytes = static_cast<size_t>(f.max_body_bytes);
  f.http.max_batch = f.engine.max_batch;
  f.http.created = static_cast<int64_t>(std::time(nullptr));
  if (!f.stop_ids.empty())
    for (int64_t id : ParseIdList(f.stop_ids, "--stop-ids", int64_t{f.engine.vocab}))
      f.engine.stop_ids.push_back(static_cast<int32_t>(id));
  std::sort(f.engine.stop_ids.begin(), f.engine.stop_ids.end());
  for (size_t a = 0, b; a < f.wait_for.size(); a = b + 1) {
    b = f.wait_for.find(',', a);
    if (b == std::string::npos) b = f.wait_for.size();
    if (b > a) f.engine.services.push_back(f.wait_for.substr(a, b - a));
  }
  f.http.allowed_hosts = server::DefaultAllowedHosts(host, f.bind_address);
  for (size_t a = 0, b; a < f.allowed_hosts.size(); a = b + 1) {
    b = f.allowed_hosts.find(',', a);
    if (b == std::string::npos) b = f.allowed_hosts.size();
    if (b > a) f.http.allowed_hosts.push_back(f.allowed_hosts.substr(a, b - a));
  }
  f.engine.compute = f.compute;
  f.engine.tokenizer = f.tokenizer;
  return svc::RunService<Server>(f.control, "server", f);
}

}  // namespace

int main(int argc, char** argv) {
  k3::InitProcess();  // whole stderr lines, harmless signals (common/process_init.h)
  return k3::RunMain("k3-server", [&] { return Main(argc, argv); });
}
