// The tool fields of a /v1/chat/completions body (docs/server.md "Tool calls"): `tools`,
// `tool_choice`, `parallel_tool_calls`, an assistant message's `tool_calls` and a tool
// message's `tool_call_id` and `name`. Each throws ToolFieldError naming the field; the order
// of the conversation (which tool message answers which call) is the chat template's to check.
#pragma once
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "services/server/job.h"

namespace k3::server {

struct ToolFieldError {
  std::string message;
};

// tools, tool_choice, parallel_tool_calls -> spec.tools_json and spec.tools.
void ParseToolFields(const nlohmann::json& body, RequestSpec& spec);
// messages[i] of `role`: an assistant's tool_calls, a tool message's tool_call_id.
void ParseMessageToolFields(const nlohmann::json& m, size_t i, const std::string& role, ChatMessage& out);
// A tool message's `name` must be the function of the call it answers (its tool_call_id
// among the calls of the assistant message before it).
void CheckToolMessageNames(const nlohmann::json& messages, const std::vector<ChatMessage>& parsed);

}  // namespace k3::server
