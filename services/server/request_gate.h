// What a request must show before any route runs (pure; http_api.cpp calls it from the
// pre-routing handler). A browser can send a key-less loopback server "simple" requests from
// any page (text/plain or form bodies, no preflight) and, through DNS rebinding, read the
// replies under its own host name; so:
//   - an API key, when set: `Authorization: Bearer KEY` (the scheme in any case, RFC 7235;
//     the key compared in constant time), else 401; /health is open;
//   - a path asked with a method it does not answer: 405 with Allow (status_headers.h);
//   - POST bodies must be JSON: `Content-Type: application/json` (parameters such as charset
//     allowed), else 415; no browser can send that cross-origin without a preflight, which
//     k3-server never answers with Access-Control-Allow-* headers. A body with no
//     Content-Type at all is taken as JSON when an API key is asked (sending the key needs a
//     preflight too), and is 415 without one (a page can send a type-less body, a Blob or an
//     ArrayBuffer, as a simple request);
//   - without an API key, the Host header must name this server: a name in `allowed_hosts`
//     (by default the --listen host, the address bound, localhost, 127.0.0.1 and [::1]), with
//     or without the bound port; "*" in the list allows any; else 403.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "services/server/job.h"

namespace k3::server {

struct GateConfig {
  std::string api_key;                     // "" = none asked
  std::vector<std::string> allowed_hosts;  // Host names accepted without a key; "*" = any
  int port = 0;                            // the bound port (a Host may carry it)
};

struct GateRequest {
  std::string method, path, authorization, content_type, host;
};

// The error to answer with, or nullopt when the request may go on to its route.
std::optional<HttpError> CheckRequest(const GateRequest& r, const GateConfig& c);

// The default allowed_hosts for a server listening on `listen_host` bound to `bound_address`.
std::vector<std::string> DefaultAllowedHosts(const std::string& listen_host, const std::string& bound_address);

}  // namespace k3::server
