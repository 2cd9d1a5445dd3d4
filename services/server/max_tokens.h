// How a request meets the server's bounds on its generated tokens (common/max_tokens_policy.h;
// docs/server.md): above the limit it is refused (400 naming both), without max_tokens it gets
// the default. On the real model a token can take seconds, so "up to the context" (32,768)
// would be days; 0 keeps that for either. The context still cuts what it does not leave room
// for (the engine, finish "length").
#pragma once
#include <optional>

#include "common/max_tokens_policy.h"
#include "services/server/job.h"

namespace k3::server {

using k3::MaxTokensPolicy;

// Checks spec.max_tokens against the limit (the 400) and fills in the default.
std::optional<HttpError> ApplyMaxTokens(RequestSpec& spec, const MaxTokensPolicy& p);

}  // namespace k3::server
