#include "services/server/request_gate.h"

#include <algorithm>
#include <cctype>

#include "services/server/status_headers.h"

namespace k3::server {
namespace {

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string Trim(const std::string& s) {
  size_t a = 0, b = s.size();
  while (a < b && (s[a] == ' ' || s[a] == '\t')) ++a;
  while (b > a && (s[b - 1] == ' ' || s[b - 1] == '\t')) --b;
  return s.substr(a, b - a);
}

// Equal strings, in time that depends only on their lengths.
bool SameSecret(const std::string& a, const std::string& b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i % std::max<size_t>(b.size(), 1)]);
  return diff == 0 && !b.empty();
}

// "name", "name:port", "[v6]", "[v6]:port" -> the name without brackets, and the port ("" = none).
std::pair<std::string, std::string> SplitHost(const std::string& host) {
  if (!host.empty() && host.front() == '[') {
    const size_t close = host.find(']');
    if (close == std::string::npos) return {host, ""};
    const std::string rest = host.substr(close + 1);
    return {host.substr(1, close - 1), rest.size() > 1 && rest[0] == ':' ? rest.substr(1) : ""};
  }
  const size_t colon = host.rfind(':');
  if (colon != std::string::npos && host.find(':') == colon) return {host.substr(0, colon), host.substr(colon + 1)};
  return {host, ""};
}

bool HostAllowed(const std::string& header, const GateConfig& c) {
  if (std::find(c.allowed_hosts.begin(), c.allowed_hosts.end(), "*") != c.allowed_hosts.end()) return true;
  const auto [name, port] = SplitHost(Lower(Trim(header)));
  if (name.empty() || (!port.empty() && port != std::to_string(c.port))) return false;
  for (const std::string& a : c.allowed_hosts)
    if (Lower(SplitHost(a).first) == name) return true;
  return false;
}

}  // namespace

std::vector<std::string> DefaultAllowedHosts(const std::string& listen_host, const std::string& bound_address) {
  std::vector<std::string> out = {listen_host, bound_address, "localhost", "127.0.0.1", "::1"};
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::optional<HttpError> CheckRequest(const GateRequest& r, const GateConfig& c) {
  if (!c.api_key.empty() && r.path != "/health") {
    const std::string auth = Trim(r.authorization);
    const size_t sp = auth.find(' ');
    const bool bearer = sp != std::string::npos && Lower(auth.substr(0, sp)) == "bearer";
    if (!bearer || !SameSecret(Trim(auth.substr(sp + 1)), c.api_key))
      return HttpError{401, auth.empty() ? "missing API key: send 'Authorization: Bearer KEY'" : "incorrect API key provided",
                       "invalid_request_error", "invalid_api_key"};
  }
  if (c.api_key.empty() && !HostAllowed(r.host, c))
    return HttpError{403,
                     "Host '" + r.host + "' is not this server's name (a web page reaching a key-less server through "
                     "another name is refused); allowed: see allowed_hosts",
                     "invalid_request_error", "host_not_allowed"};
  if (std::optional<HttpError> e = MethodNotAllowed(r.method, r.path)) return e;
  if (r.method == "POST") {
    const std::string type = Lower(Trim(r.content_type.substr(0, r.content_type.find(';'))));
    // No type at all is JSON when a key is asked: a page cannot send the key without a
    // preflight, which is never granted. Without a key it stays refused: a page can send a
    // body with no type (a Blob or an ArrayBuffer) as a simple request.
    const bool untyped_with_key = Trim(r.content_type).empty() && !c.api_key.empty();
    if (type != "application/json" && !untyped_with_key)
      return HttpError{415,
                       "the body must be JSON: send 'Content-Type: application/json'" +
                           (r.content_type.empty() ? std::string(" (a body without a type is taken as JSON only by a "
                                                                 "server with an API key)")
                                                   : " (got '" + r.content_type + "')"),
                       "invalid_request_error", "unsupported_media_type"};
  }
  return std::nullopt;
}

}  // namespace k3::server
