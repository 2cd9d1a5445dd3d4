// The headers two error statuses carry (RFC 9110): a 405 names the methods the path answers
// (Allow), a 429 says when to come back (Retry-After). Pure; the HTTP side sends
// HttpError::headers with the error object.
#pragma once
#include <optional>
#include <string>

#include "services/server/job.h"

namespace k3::server {

// The Allow value of one of k3-server's paths ("GET, HEAD" or "POST"); nullopt for a path it
// does not have (404).
std::optional<std::string> AllowedMethods(const std::string& path);

// 405 with Allow when `path` is one of ours but does not answer `method`; nullopt otherwise.
std::optional<HttpError> MethodNotAllowed(const std::string& method, const std::string& path);

// Seconds a refused client should wait before retrying: a place opens when one of the
// `max_batch` running requests ends, about every mean duration / max_batch. At least 1 (also
// before any request has completed), at most an hour.
int RetryAfterSeconds(double mean_request_seconds, int max_batch);

// `e` with its Retry-After header.
HttpError WithRetryAfter(HttpError e, double mean_request_seconds, int max_batch);

}  // namespace k3::server
