// Strict standard base64 (RFC 4648 alphabet, '=' padding required) for tiktoken.model lines.
#pragma once
#include <optional>
#include <string>
#include <string_view>

namespace k3::tok {

// Decodes `in`; nullopt when the length is not a multiple of 4, a character is outside the
// alphabet, padding is misplaced, or the unused bits of the last symbol are not zero
// (so every byte string has exactly one accepted spelling).
std::optional<std::string> Base64Decode(std::string_view in);

std::string Base64Encode(std::string_view bytes);

}  // namespace k3::tok
