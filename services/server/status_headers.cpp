#include "services/server/status_headers.h"

#include <algorithm>
#include <cmath>

namespace k3::server {

std::optional<std::string> AllowedMethods(const std::string& path) {
  // The routes http_api.cpp installs. httplib answers HEAD with the GET route.
  if (path == "/v1/models" || path == "/health" || path == "/metrics") return "GET, HEAD";
  if (path.rfind("/v1/models/", 0) == 0 && path.size() > 11) return "GET, HEAD";
  if (path == "/v1/completions" || path == "/v1/chat/completions") return "POST";
  return std::nullopt;
}

std::optional<HttpError> MethodNotAllowed(const std::string& method, const std::string& path) {
  const std::optional<std::string> allow = AllowedMethods(path);
  if (!allow) return std::nullopt;
  const bool get = *allow == "GET, HEAD";
  if (get ? method == "GET" || method == "HEAD" : method == "POST") return std::nullopt;
  HttpError e{405, method + " is not allowed on " + path + ": use " + (get ? "GET" : "POST"), "invalid_request_error",
              "method_not_allowed"};
  e.headers.emplace_back("Allow", *allow);
  return e;
}

int RetryAfterSeconds(double mean_request_seconds, int max_batch) {
  if (!(mean_request_seconds > 0) || max_batch < 1) return 1;
  const double s = std::ceil(mean_request_seconds / max_batch);
  return static_cast<int>(std::clamp(s, 1.0, 3600.0));
}

HttpError WithRetryAfter(HttpError e, double mean_request_seconds, int max_batch) {
  e.headers.emplace_back("Retry-After", std::to_string(RetryAfterSeconds(mean_request_seconds, max_batch)));
  return e;
}

}  // namespace k3::server
