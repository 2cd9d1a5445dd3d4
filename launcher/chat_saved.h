// What /save keeps in a state file's `extra` besides compute's state, and /load reads back:
// the history, the thinking settings, the last rendering and whether the state ends with a
// whole reply (docs/chat.md).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "common/chat_format.h"

namespace k3::launch {

constexpr int kChatStateVersion = 1;  // the `k3_chat` key

struct SavedChat {
  std::vector<ChatMessage> history;
  bool thinking = true;
  std::string effort;
  std::vector<int32_t> last_render;
  bool state_valid = false;
};

std::string SavedChatExtra(const SavedChat& s);  // ill-formed UTF-8 becomes U+FFFD
// Throws std::exception (the reason) when `extra` holds no chat of this version.
SavedChat ParseSavedChat(const std::string& extra);

}  // namespace k3::launch
