// The chat's settings that /set changes between turns (docs/chat.md "/set"): the sampling
// options and thinking, checked with the rules of their flags (common/sampling_check.h for
// sampling, IsThinkingEffort for the effort), pure. A rejected /set leaves them as they were.
#pragma once
#include <string>
#include <string_view>

#include "common/ipc/messages.h"

namespace k3::launch {

// The efforts K3's encoder accepts (`medium` is refused, as by the released encoder): the one
// rule of --thinking-effort, the TOML key and /set effort.
inline bool IsThinkingEffort(std::string_view e) { return e == "low" || e == "high" || e == "max"; }

struct ChatSettings {
  ipc::compute::Sampling sampling;
  bool thinking = true;
  std::string effort = "max";
};

// `arg` is what follows "/set": "temperature 0.7", "seed 5", "think off", "effort low" (which
// also turns thinking on, as --thinking-effort excludes --no-think). Returns "" after changing
// `s`, else one line saying why not, `s` unchanged. Keys are the TOML's (top_p; top-p too).
std::string ApplySet(ChatSettings& s, const std::string& arg);

// What "/set" alone prints: one line, "temperature 0.7  top_k 0  ...  seed 42  think on  effort max".
std::string SettingsText(const ChatSettings& s);

// The keys /set takes, for /help and the error line.
std::string SetKeys();

// What /help prints; `local`: the commands on compute's state too (/save, /load; not with --connect).
std::string ChatHelp(bool local);

}  // namespace k3::launch
