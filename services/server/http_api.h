// The HTTP side of k3-server on cpp-httplib: routes (/v1/models, /v1/completions,
// /v1/chat/completions, /health, /metrics), the Bearer key check, OpenAI error objects for
// every error status (httplib's own 404 and 413 included) and 429 for connections beyond the
// thread pool (task_queue.h). Each completion request waits for its Job in its own HTTP thread,
// watching its client's socket (client_socket.h); a streamed answer is written by a content
// provider (chunked, or close-delimited for HTTP/1.0). Bodies are read bounded (body_limits.h).
#pragma once
#include <httplib.h>

#include <cstdint>
#include <string>
#include <vector>

#include "services/server/engine.h"
#include "services/server/max_tokens.h"
#include "services/server/metrics.h"
#include "services/server/openai_request.h"

namespace k3::server {

// Connections the kernel holds for accept() (httplib's own is 5).
inline constexpr int kListenBacklog = 1024;

struct HttpConfig {
  std::string model_name;
  std::string api_key;  // "" = no key asked
  size_t max_body_bytes = 1 << 20;
  int threads = 8;
  RequestDefaults defaults;
  // Host names a key-less server answers (request_gate.h); set by k3-server from --listen and
  // --allowed-hosts, with the bound port.
  std::vector<std::string> allowed_hosts;
  int port = 0;
  int max_batch = 1;           // Retry-After's estimate (status_headers.h)
  MaxTokensPolicy max_tokens;  // --max-tokens-default / --max-tokens-limit
  int64_t created = 0;         // /v1/models' "created": when k3-server started (Unix seconds)
};

void InstallRoutes(httplib::Server& svr, Engine& engine, Metrics& metrics, const HttpConfig& cfg);

}  // namespace k3::server
