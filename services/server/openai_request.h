// The body of POST /v1/completions and /v1/chat/completions -> RequestSpec, or the 400 error
// naming the field (docs/server.md lists the parameters). Sampling parameters absent from the
// request keep the server's defaults (k3-launch's TOML/flags); ranges are the engine's own
// (common/sampling_check.h).
#pragma once
#include <string>
#include <variant>

#include "common/json_strict.h"
#include "services/server/job.h"

namespace k3::server {

struct RequestDefaults {
  ipc::compute::Sampling sampling;  // seed unused: a request without one gets a random seed
  bool thinking = true;
  std::string effort = "max";
};

// The largest logprobs / top_logprobs a request may ask for.
inline constexpr int kMaxRequestLogprobs = 20;
inline constexpr size_t kMaxCacheSaltBytes = 256;  // cache_salt: a label, not a payload

// The body is parsed strictly (a repeated key is 400) within `limits` (services/server/body_limits.h).
std::variant<RequestSpec, HttpError> ParseRequest(const std::string& body, Endpoint endpoint,
                                                  const RequestDefaults& defaults, const JsonLimits& limits = {});

}  // namespace k3::server
