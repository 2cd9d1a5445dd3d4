// The chat REPL's decisions for one turn, pure: which ids go to compute (all of them, or only
// those after what compute's kept state holds, with the ids that close a reply cut short),
// whether they fit the context, the Generate, what compute holds afterwards, the turn's
// summary line; and a command line's name and argument.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/chat_format.h"
#include "common/ipc/messages.h"
#include "launcher/options.h"

namespace k3::launch {

// One turn as --out reports it (docs/formats.md, "Chat report").
struct ChatTurn {
  int64_t prompt_tokens = 0;     // ids sent to compute for this turn (only the new ones)
  int64_t reused_tokens = 0;     // ids not prefilled: in compute's kept state or a prefix snapshot
  int64_t generated_tokens = 0;
  std::string reasoning, response;
  std::string finish_reason;     // "stop", "length", "cancelled", "interrupted"
  double seconds = 0;            // the line entered -> Done
  std::optional<double> first_token_seconds;  // the line entered -> the first generated id (none: no id)
};

// The ids to send for a new turn. `rendered` is the whole conversation with the generation
// prompt; `previous_render` the length of the last turn's rendering, whose ids compute's state
// holds followed by the generated reply. The reply's message ends at the first <|end_of_msg|>
// after that length (no text segment can produce the id), so the new ids are what follows it.
// nullopt when the renderings disagree (then the whole conversation is sent again).
std::optional<std::vector<int32_t>> NewTurnIds(const std::vector<int32_t>& rendered,
                                               const std::vector<int32_t>& previous_rendered, int32_t eom);

// The ids K3's template puts after a reply's `generated` ids to close its message: the rest of
//   reasoning <|close|>think<|sep|><|open|>response<|sep|> content <|close|>response<|sep|>
//   <|close|>message<|sep|><|end_of_msg|>
// (thinking off: from `content`) after the point the reply was cut, the channel it was cut in
// left as it is. Empty when the reply ended (<|end_of_msg|> or [EOS]); nullopt when the ids
// leave that structure (<|open|>, <|close|> or <|sep|> where the template has none), which no
// closing continues.
std::optional<std::vector<int32_t>> ReplyClosing(const std::vector<int32_t>& generated, const ChatControlIds& ids,
                                                 bool thinking);

// What compute's kept state holds of the conversation, as the next turn sees it.
struct KeptConversation {
  std::vector<int32_t> last_render;  // the last turn's rendering: the state starts with it, then the reply
  std::vector<int32_t> closing;      // the ids that close that reply (ReplyClosing), sent first next turn
  int64_t ids = 0;                   // ids in compute's state (consumed or pending)
  bool valid = false;                // the state is the conversation so far: the next turn appends to it
};

struct TurnPlan {
  std::vector<int32_t> send;  // the ids of the Generate
  bool keep = false;          // appended to compute's kept state
  int64_t reused = 0;         // ids of that state
  int64_t room = 0;           // positions left to generate; < 1: the context is full
};
// Extends a valid kept state by its closing ids and the new turn's ids, else sends the whole
// rendering.
TurnPlan PlanTurn(const std::vector<int32_t>& rendered, const KeptConversation& kept, int32_t eom, int64_t context);

// The turn's Generate: up to its end id, bounded by the room left in the context and by
// --reply-limit when set (not --gen, which is for one-shot runs); it ends at --stop-id(s),
// <|end_of_msg|> or [EOS]. snapshot_at = BeforeNewestMessage of what it sends (a prefix
// snapshot there, which a later chat with the same preamble starts from).
// `sampling`: the session's (the options', as /set left them).
ipc::compute::Generate TurnGenerate(const LaunchOptions& opt, const TurnPlan& plan, const ChatControlIds& ids,
                                    uint64_t request_id, const ipc::compute::Sampling& sampling);

// The ids compute holds after a turn: Done's position, or (an older compute) what was sent and generated.
int64_t KeptAfterTurn(int64_t done_position, int64_t reused, int64_t prompt, int64_t generated);

// The kept state after a turn that sent `plan` for the conversation `rendered` and got
// `generated` back, Done reporting `done_position`. The next turn extends it only when the
// state holds exactly what was sent and generated (not a prompt a Cancel cut midway) and the
// reply ended or can be closed; it continues from the ids compute was fed, not from the
// reply's text tokenized again.
KeptConversation AfterTurn(const TurnPlan& plan, const std::vector<int32_t>& rendered,
                           const std::vector<int32_t>& generated, int64_t done_position, const ChatControlIds& ids,
                           bool thinking);

// The stderr line after a reply: "[chat] 12 tokens (stop) in 2.31 s, first token 0.042 s, 4.8
// tokens/s; 57 ids reused, 9 prefilled", and why it ended when that was not its end id. The rate
// is of the ids after the first (the decode, not the prefill), when there are two or more.
std::string TurnSummary(const ChatTurn& t, int64_t reply_limit);
// The same for one prompt through --connect: "[connect] 32 tokens (length) in 0.81 s, first token
// 0.120 s, 45.2 tokens/s; 12 prompt tokens, 0 cached".
std::string PromptSummary(const ChatTurn& t);

// "/save  a b " -> {"/save", "<cwd>/a b"}: the command and its trimmed argument; a state file
// is named relative to where the user is, whatever compute's directory.
struct ChatCommand {
  std::string cmd, arg;
};
ChatCommand ParseChatCommand(const std::string& line);

}  // namespace k3::launch
