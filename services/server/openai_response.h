// OpenAI's response shapes for what a Job produced: the whole answer (chat.completion,
// text_completion), the streamed chunks (chat.completion.chunk, text_completion), usage,
// logprobs and error objects.
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "services/server/job.h"

namespace k3::server {

nlohmann::json ErrorJson(const HttpError& e);
// JSON text; invalid UTF-8 (a token that is part of a character) is replaced, never thrown on.
std::string Dump(const nlohmann::json& j);

struct ResponseIds {
  std::string id;     // "cmpl-..." / "chatcmpl-..."
  int64_t created = 0;
  std::string model;
};

// usage with prompt_tokens_details.cached_tokens (and completion_tokens_details.reasoning_tokens
// for chat).
nlohmann::json UsageJson(const Job& j);
// The logprobs object of a choice for `tokens`; `text_offset` (completions) starts at `offset`.
nlohmann::json LogprobsJson(Endpoint e, const std::vector<TokenLogprob>& tokens, size_t offset);

// The non-streamed answer from every delta joined (the Job is finished; caller holds its mu).
nlohmann::json FullResponse(const ResponseIds& ids, const Job& j, const std::vector<Delta>& deltas);
// One streamed chunk: a delta (finish_reason null), or the last one (finish given).
nlohmann::json Chunk(const ResponseIds& ids, const Job& j, const Delta* d, bool first, const std::string& finish,
                     size_t text_offset);
// The usage chunk of stream_options.include_usage (choices empty).
nlohmann::json UsageChunk(const ResponseIds& ids, const Job& j);

}  // namespace k3::server
