// k3-launch --connect URL (docs/chat.md "A running server"): --chat or one prompt through a
// running k3-launch --serve's OpenAI API, so the model stays pinned and warm between sessions
// and several people share it. No service is started. The chat behaves as a local one (the
// same input, /set, drawing and summary line); /save and /load, which act on compute's state,
// are the local chat's only.
#pragma once
#include "launcher/options.h"

namespace k3::launch {

// The exit code (docs/exit-codes.md); failures throw k3::Error.
int RunConnected(const LaunchOptions& opt);

}  // namespace k3::launch
