// What /save keeps in a state file's `extra` besides compute's state, and /load reads back:
// the history, the thinking settings, the last rendering, whether the state is the
// conversation so far and the ids that close its last reply (docs/chat.md).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "common/chat_format.h"

namespace k3::launch {

// The `k3_chat` key written. Version 2 added `closing`: a version-1 reader would extend a
// state whose last reply was cut short without closing it, so it refuses these files.
constexpr int kChatStateVersion = 2;

struct SavedChat {
  std::vector<ChatMessage> history;
  bool thinking = true;
  std::string effort;
  std::vector<int32_t> last_render;
  bool state_valid = false;
  std::vector<int32_t> closing;  // sent before the next turn's ids (empty after a reply that ended)
};

std::string SavedChatExtra(const SavedChat& s);  // ill-formed UTF-8 becomes U+FFFD
// Throws std::exception (the reason) when `extra` holds no chat of version 1 (no `closing`:
// its valid states ended by themselves) or 2.
SavedChat ParseSavedChat(const std::string& extra);

}  // namespace k3::launch
