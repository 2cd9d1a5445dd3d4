#include "common/max_tokens_policy.h"

namespace k3 {

std::string MaxTokensPolicyProblem(const MaxTokensPolicy& p) {
  if (p.default_tokens < 0) return "max_tokens_default must be >= 0 (0: the limit, or up to the context)";
  if (p.limit < 0) return "max_tokens_limit must be >= 0 (0: no limit)";
  if (p.limit > 0 && p.default_tokens > p.limit)
    return "max_tokens_default " + std::to_string(p.default_tokens) + " is above max_tokens_limit " +
           std::to_string(p.limit);
  return "";
}

}  // namespace k3
