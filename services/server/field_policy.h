// Fields of OpenAI's and vLLM's APIs that k3-server does not implement: a request that sets one
// to anything but its no-op value is 400 naming it, never accepted and ignored (docs/server.md
// "Field policy" lists every field and why). Other unknown fields are ignored.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

namespace k3::server {

// The 400 message for the first refused field of `body`, or "".
std::string RefusedField(const nlohmann::json& body);

}  // namespace k3::server
