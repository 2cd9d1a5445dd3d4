// A chat transcript as the template and the history file see it.
#pragma once
#include <optional>
#include <string>
#include <vector>

namespace k3::tok {

enum class Role { kSystem, kUser, kAssistant, kTool };

const char* RoleName(Role r);

// A call an assistant message made (OpenAI's tool_calls[i]: id, function.name, and
// function.arguments as the JSON text the client sent).
struct ToolCall {
  std::string id, name, arguments;
  bool operator==(const ToolCall&) const = default;
};

struct ChatMessage {
  Role role;
  std::string content;
  std::optional<std::string> reasoning_content;  // assistant only
  std::vector<ToolCall> tool_calls = {};                 // assistant only
  std::optional<std::string> tool_call_id = std::nullopt;  // tool only (required there): the call it answers

  bool operator==(const ChatMessage&) const = default;
};

// tool_choice as the template renders it: kNamed renders as kRequired (tool_template.cpp).
enum class ToolChoice { kAuto, kNone, kRequired, kNamed };

}  // namespace k3::tok
