// --connect (docs/chat.md "A running server"): the pure half of talking to a running
// `k3-launch --serve` through its OpenAI API. The URL, the request bodies, the server-sent
// events of a streamed reply, and what an HTTP failure means for the user (one line, an exit
// code of docs/exit-codes.md). The transport is remote_client.h.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/chat_format.h"
#include "common/error.h"
#include "launcher/chat_settings.h"

namespace k3::launch {

struct ServerUrl {
  std::string host;  // a name, an IPv4 address, or an IPv6 address without its brackets
  int port = 80;
  std::string prefix;  // the path before /v1 ("" or "/k3"), no trailing '/'
};
// "http://HOST[:PORT][/PREFIX]" (a trailing "/v1" or "/" is dropped: the OpenAI base URL works).
// nullopt with `why` set otherwise (https is not spoken: a TLS proxy in front of k3-server would be
// the server's business, and httplib's TLS is not in Debian's build we use).
std::optional<ServerUrl> ParseServerUrl(const std::string& url, std::string* why = nullptr);
std::string ServerUrlProblem(const std::string& url);  // "" or "'URL': why"

// The chat request for `history` (system, user and assistant messages, reasoning as
// reasoning_content) with the session's settings: streamed, usage included, the reply's
// token ids asked for (return_token_ids). `max_tokens` 0: none (the reply runs to its end).
nlohmann::json ChatRequest(const std::string& model, const std::vector<ChatMessage>& history, const ChatSettings& s,
                           int64_t max_tokens, const std::vector<std::string>& stop, bool ignore_eos);
// The completion request for a text `prompt`, or for token `ids` when `prompt` is empty.
nlohmann::json CompletionRequest(const std::string& model, const std::string& prompt, const std::vector<int32_t>& ids,
                                 const ipc::compute::Sampling& s, int64_t max_tokens,
                                 const std::vector<std::string>& stop, bool ignore_eos);

// Splits a text/event-stream body into its events' data, across any cut of the bytes.
class SseSplitter {
 public:
  // The `data:` payloads of the events completed by `bytes` (comments such as ": waiting" and
  // other fields skipped; a multi-line data joined with '\n').
  std::vector<std::string> Push(std::string_view bytes);

 private:
  std::string buf_, data_;
  bool has_data_ = false;
};

// One streamed chunk as the terminal needs it.
struct StreamPiece {
  std::string reasoning, content;      // chat: delta.reasoning_content, delta.content; completion: text
  std::string finish_reason;           // "" until the last chunk
  std::vector<int32_t> token_ids;      // with the finish (return_token_ids)
  std::optional<int64_t> prompt_tokens, completion_tokens, cached_tokens;  // the usage chunk
  bool done = false;                   // data: [DONE]
};
// Throws Error(kExitRuntime, "...") when `data` is neither [DONE] nor a chunk (or is an error object).
StreamPiece ParseStreamData(const std::string& data);

// What an HTTP status means here: 401/403 the key (exit 2: the command line or config is
// wrong), 400/404/413 the request or the URL (2), 429 the server busy (1), 5xx and the rest a
// failed server (1). `body` is the server's reply; its error message is quoted when it has one.
Error HttpFailure(const std::string& url, int status, const std::string& body);

// The served model's id from GET /v1/models; throws Error(kExitRuntime) when the body is not a model list.
std::string ServedModel(const std::string& body);

}  // namespace k3::launch
