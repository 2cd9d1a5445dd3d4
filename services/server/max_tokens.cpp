#include "services/server/max_tokens.h"

namespace k3::server {

std::optional<HttpError> ApplyMaxTokens(RequestSpec& spec, const MaxTokensPolicy& p) {
  if (spec.max_tokens) {
    if (p.limit > 0 && *spec.max_tokens > p.limit)
      return HttpError{400,
                       std::string("'") + spec.max_tokens_field + "' " + std::to_string(*spec.max_tokens) +
                           " is above this server's limit of " + std::to_string(p.limit) + " (max_tokens_limit)",
                       "invalid_request_error", "invalid_value"};
    return std::nullopt;
  }
  if (p.default_tokens > 0) spec.max_tokens = p.default_tokens;
  else if (p.limit > 0) spec.max_tokens = p.limit;
  return std::nullopt;
}

}  // namespace k3::server
