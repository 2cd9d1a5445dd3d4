// The chat REPL's decisions for one turn, pure: which ids go to compute (all of them, or only
// those after what compute's kept state holds), whether they fit the context, the Generate,
// what compute holds afterwards; and a command line's name and argument.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/chat_format.h"
#include "common/ipc/messages.h"
#include "launcher/options.h"

namespace k3::launch {

// The ids to send for a new turn. `rendered` is the whole conversation with the generation
// prompt; `previous_render` the length of the last turn's rendering, whose ids compute's state
// holds followed by the generated reply. The reply's message ends at the first <|end_of_msg|>
// after that length (no text segment can produce the id), so the new ids are what follows it.
// nullopt when the renderings disagree (then the whole conversation is sent again).
std::optional<std::vector<int32_t>> NewTurnIds(const std::vector<int32_t>& rendered,
                                               const std::vector<int32_t>& previous_rendered, int32_t eom);

struct TurnPlan {
  std::vector<int32_t> send;  // the ids of the Generate
  bool keep = false;          // appended to compute's kept state
  int64_t reused = 0;         // ids of that state
  int64_t room = 0;           // positions left to generate; < 1: the context is full
};
// `kept`: ids in compute's state; `state_valid`: it ends with a whole reply, so the turn can
// extend it.
TurnPlan PlanTurn(const std::vector<int32_t>& rendered, const std::vector<int32_t>& last_render, bool state_valid,
                  int64_t kept, int32_t eom, int64_t context);

// The turn's Generate: at most `room` ids (and --gen), ending at --stop-id(s), <|end_of_msg|>
// or [EOS]; snapshot_at = BeforeNewestMessage of what it sends (a prefix snapshot there, which
// a later chat with the same preamble starts from).
ipc::compute::Generate TurnGenerate(const LaunchOptions& opt, const TurnPlan& plan, const ChatControlIds& ids,
                                    uint64_t request_id);

// The ids compute holds after a turn: Done's position, or (an older compute) what was sent and generated.
int64_t KeptAfterTurn(int64_t done_position, int64_t reused, int64_t prompt, int64_t generated);

// "/save  a b " -> {"/save", "<cwd>/a b"}: the command and its trimmed argument; a state file
// is named relative to where the user is, whatever compute's directory.
struct ChatCommand {
  std::string cmd, arg;
};
ChatCommand ParseChatCommand(const std::string& line);

}  // namespace k3::launch
