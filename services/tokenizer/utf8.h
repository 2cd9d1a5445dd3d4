// UTF-8 well-formedness (Unicode Table 3-7: no overlongs, no surrogates, nothing above
// U+10FFFF). Shared by the encoder (which splits input at ill-formed bytes), the streaming
// decoder and the history reader.
#pragma once
#include <cstddef>
#include <string_view>

namespace k3::tok {

// Length (1..4) of the well-formed character starting at s[i], or 0 if the bytes at i do
// not start one (ill-formed or truncated).
size_t Utf8CharLen(std::string_view s, size_t i);

// Length of the longest well-formed prefix of s.
size_t Utf8ValidPrefix(std::string_view s);

inline bool IsValidUtf8(std::string_view s) { return Utf8ValidPrefix(s) == s.size(); }

// Number of trailing bytes of s that form an incomplete but still completable character
// (0..3). The streaming decoder holds exactly these back.
size_t Utf8IncompleteTail(std::string_view s);

}  // namespace k3::tok
