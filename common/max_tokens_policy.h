// The server's bounds on a request's generated tokens, as k3-launch (max_tokens_default,
// max_tokens_limit) and k3-server (--max-tokens-default, --max-tokens-limit) take them; one
// check for both, so a bad pair is exit 2 before anything starts. How a request meets them:
// services/server/max_tokens.h.
#pragma once
#include <cstdint>
#include <string>

namespace k3 {

struct MaxTokensPolicy {
  int64_t default_tokens = 0;  // for a request without max_tokens; 0: the limit, or up to the context
  int64_t limit = 0;           // the most a request may ask for; 0: none
};

// "" when the pair is usable; else why not (a negative value, the default above the limit).
std::string MaxTokensPolicyProblem(const MaxTokensPolicy& p);

}  // namespace k3
