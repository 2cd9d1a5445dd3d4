// A chat transcript as the template and the history file see it.
#pragma once
#include <optional>
#include <string>
#include <vector>

namespace k3::tok {

enum class Role { kSystem, kUser, kAssistant };

const char* RoleName(Role r);

struct ChatMessage {
  Role role;
  std::string content;
  std::optional<std::string> reasoning_content;  // assistant only

  bool operator==(const ChatMessage&) const = default;
};

}  // namespace k3::tok
