#include "services/server/timings.h"

#include <algorithm>

namespace k3::server {

nlohmann::json TimingsJson(const Job& j) {
  const int64_t prompt_n = std::max<int64_t>(0, j.prompt_tokens - j.cached_tokens);
  const double prompt_ms = j.prefill_seconds * 1e3;
  const int64_t passes = std::max<int64_t>(0, j.completion_tokens - 1);
  const double per_token_ms = passes > 0 ? j.seconds_per_token * 1e3 : 0.0;
  return {{"cache_n", j.cached_tokens},
          {"prompt_n", prompt_n},
          {"prompt_ms", prompt_ms},
          {"prompt_per_token_ms", prompt_n > 0 ? prompt_ms / static_cast<double>(prompt_n) : 0.0},
          {"prompt_per_second", prompt_ms > 0 ? static_cast<double>(prompt_n) * 1e3 / prompt_ms : 0.0},
          {"predicted_n", j.completion_tokens},
          {"predicted_ms", per_token_ms * static_cast<double>(passes)},
          {"predicted_per_token_ms", per_token_ms},
          {"predicted_per_second", per_token_ms > 0 ? 1e3 / per_token_ms : 0.0}};
}

}  // namespace k3::server
