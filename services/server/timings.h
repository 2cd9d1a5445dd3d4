// The per-response "timings" object, with the names and meanings of llama.cpp's server (its
// result_timings), so clients written for it read k3's too: from compute's RunStats of the
// request (Done), never from the server's clock.
//   cache_n                  prompt ids a prefix snapshot saved (usage's cached_tokens)
//   prompt_n, prompt_ms      prompt ids prefilled (prompt_tokens - cache_n) and their time
//   prompt_per_token_ms, prompt_per_second
//   predicted_n              generated ids (usage's completion_tokens)
//   predicted_ms             the decode passes after the prompt's (the first id comes from the
//                            prompt pass, so predicted_n - 1 passes)
//   predicted_per_token_ms, predicted_per_second   per decode pass (compute's seconds_per_token)
// A rate without its time (no ids, or no decode pass) is 0.
#pragma once
#include <nlohmann/json.hpp>

#include "services/server/job.h"

namespace k3::server {

// For a finished job (the caller holds its mu).
nlohmann::json TimingsJson(const Job& j);

}  // namespace k3::server
