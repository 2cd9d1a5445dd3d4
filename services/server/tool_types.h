// Tool calling's plain types, shared by the request (RequestSpec), the engine and the
// responses: what a reply may call, a streamed piece of tool_calls, a call not accepted.
#pragma once
#include <string>
#include <vector>

#include "common/ipc/messages.h"

namespace k3::server {

// What a reply may call: the request's tools, tool_choice and parallel_tool_calls.
struct ToolRules {
  std::vector<std::string> declared;  // the function names of `tools`
  ipc::tokenizer::ToolChoice choice = ipc::tokenizer::ToolChoice::kAuto;
  std::string named;  // choice kNamed: the function
  bool parallel = true;
};

// A piece of message.tool_calls as a stream sends it: the call's start (index, id, name), or a
// fragment of its arguments (id empty).
struct ToolCallDelta {
  int index = 0;
  std::string id, name, arguments;
};

// A call from the model that was not accepted (docs/server.md "Tool calls").
struct CallProblem {
  std::string error;  // one line
  std::string raw;    // the XTML text concerned
};

}  // namespace k3::server
