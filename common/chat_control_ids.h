// The chat template's control ids, as k3-launch --chat and k3-server ask the tokenizer for
// them: each special token encoded with allow_special (one id each), and the tag names
// "think", "response", "message", "tools", "call" and "json" as plain text. One list of queries and one check of the answers.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <variant>
#include <vector>

#include "common/chat_format.h"

namespace k3 {

struct ControlIdQuery {
  const char* text;
  bool special;  // Encode.allow_special: a special token, which must be one id
};
// <|open|>, <|close|>, <|sep|>, <|end_of_msg|>, [EOS], then think, response, message, tools, call, json.
const std::vector<ControlIdQuery>& ControlIdQueries();

// Why the answers do not make a K3 chat vocabulary: a special token that is not exactly one
// id (`out_of_vocab` false) or whose id is outside [0, vocab) (true).
struct ControlIdProblem {
  std::string token;
  bool out_of_vocab = false;
  int32_t id = -1;
};

// From the tokenizer's answers (query text -> ids; a missing answer counts as no ids).
std::variant<ChatControlIds, ControlIdProblem> ControlIdsFrom(const std::map<std::string, std::vector<int32_t>>& answers,
                                                              int32_t vocab);

}  // namespace k3
