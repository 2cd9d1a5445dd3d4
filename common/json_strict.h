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

// Bounds on what a parse may build (0 = no bound): text from a client can make a parser
// allocate many times its own size ("[[],[],...]" builds ~16 bytes of values per byte).
struct JsonLimits {
  size_t max_depth = 0;         // arrays and objects open at once
  size_t max_parsed_bytes = 0;  // JsonParsedBytes of everything built so far
};
// The same, refusing (with the bound in the message) once the text passes a bound; the parse
// stops there, before building the rest.
nlohmann::json ParseJsonStrict(std::string_view text, const std::string& what_for, ExitCode code,
                               const JsonLimits& limits);

// What one value costs in parsed_bytes: the value itself, a container's own allocation, a
// string's characters. An estimate of the heap a nlohmann::json tree holds, in one place.
size_t JsonValueCost(const nlohmann::json& v);
// An object member's key: its map node and characters.
size_t JsonKeyCost(size_t key_size);

// A name made safe for a one-line message: control and non-ASCII bytes become \xNN,
// and very long names are shortened.
std::string Printable(std::string_view s);

}  // namespace k3
