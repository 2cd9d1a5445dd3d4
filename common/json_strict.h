// Strict JSON parsing for files the engine must not trust (safetensors headers, the index,
// config.json). nlohmann::json alone silently keeps the last of duplicate object keys; this
// wrapper rejects duplicates, syntax errors and invalid UTF-8 with one k3::Error line.
#pragma once
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "common/error.h"

namespace k3 {

// Parses `text`; throws Error(code, "<what_for>: ...") on any syntax error, invalid UTF-8
// or a key repeated within one object (the message names the key).
nlohmann::json ParseJsonStrict(std::string_view text, const std::string& what_for,
                               ExitCode code = kExitBadModel);

// A name made safe for a one-line message: control and non-ASCII bytes become \xNN,
// and very long names are shortened.
std::string Printable(std::string_view s);

}  // namespace k3
