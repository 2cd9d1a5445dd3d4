// One HTTP completion request as the HTTP handler thread and the engine thread share it: what
// was asked (RequestSpec, fixed at submit), and what the engine has produced so far (under
// `mu`). The engine appends Deltas in order; the handler takes them (streamed) or joins them
// (one JSON answer). A handler whose client went away sets `client_gone`; the engine then drops
// the request from its queue or sends compute a Cancel.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/chat_format.h"
#include "common/ipc/messages.h"
#include "services/server/tool_types.h"

namespace k3::server {

enum class Endpoint { kCompletions, kChat };

// An OpenAI error object {"error": {"message", "type", "code"}} with its HTTP status.
struct HttpError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string code;  // "" = null
  std::vector<std::pair<std::string, std::string>> headers{};  // e.g. Allow (405), Retry-After (429)
};

struct RequestSpec {
  Endpoint endpoint = Endpoint::kCompletions;
  std::string model;
  std::string prompt_text;                        // completions: a text prompt
  std::optional<std::vector<int32_t>> prompt_ids;  // completions: a prompt of token ids
  std::vector<ChatMessage> messages;               // chat
  bool thinking = true;                            // chat: the template opens the reasoning channel
  std::string effort = "max";                      // chat: RenderChat's thinking_effort
  std::optional<int64_t> max_tokens;               // absent: the server's default (max_tokens.h)
  const char* max_tokens_field = "max_tokens";     // the request's name for it (chat: max_completion_tokens)
  ipc::compute::Sampling sampling;
  std::vector<std::string> stop;
  int32_t logprobs = -1;  // -1 off; N >= 0: each token's logprob and the N most likely
  bool stream = false, include_usage = false, return_token_ids = false;
  bool ignore_eos = false;  // vLLM's extension: the model's end ids do not end the request
  std::string cache_salt;   // vLLM's extension: prefix reuse only with requests of the same salt
  std::optional<std::string> json_schema;  // response_format / guided_json: the answer is one value of it
  std::string tools_json;   // chat: the `tools` array as JSON ("" = none declared)
  ToolRules tools;          // chat: what a reply may call
  bool continue_final = false;  // chat: the model continues the last (assistant) message
  // chat: a forced call of this function ("" none): the prompt opens its arguments, json_schema
  // holds its `parameters` (docs/server.md "Tool calls")
  std::string forced_call;
};

// One generated token as logprobs show it: its bytes, logprob and the most likely alternatives.
struct TokenLogprob {
  std::string text;
  float logprob = 0;
  std::vector<std::pair<std::string, float>> top;
};

// Text that became final since the previous Delta (whole UTF-8 characters, stop strings cut).
struct Delta {
  std::string reasoning, content;
  std::vector<TokenLogprob> logprobs;  // the tokens processed for this delta (content channel)
  std::vector<ToolCallDelta> tool_calls = {};  // at most one: a call's start or an arguments fragment
};

class Job {
 public:
  enum class Phase { kPreparing, kQueued, kRunning, kFinished, kFailed };
  Job(uint64_t job_id, RequestSpec request) : id(job_id), spec(std::move(request)) {}

  const uint64_t id;
  const RequestSpec spec;
  const std::chrono::steady_clock::time_point arrived = std::chrono::steady_clock::now();
  std::atomic<bool> client_gone{false};

  std::mutex mu;
  std::condition_variable cv;
  // Under mu:
  Phase phase = Phase::kPreparing;
  HttpError error;            // kFailed
  std::deque<Delta> deltas;   // produced, not yet taken
  std::string finish_reason;  // kFinished: "stop", "length" or "tool_calls"
  std::vector<CallProblem> tool_call_errors;  // kFinished: calls from the model not accepted
  int64_t prompt_tokens = 0, completion_tokens = 0, cached_tokens = 0, reasoning_tokens = 0;
  double prefill_seconds = 0, seconds_per_token = 0;  // compute's RunStats (timings.h)
  std::vector<int32_t> prompt_ids, token_ids;
};

}  // namespace k3::server
