#include "pretokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <array>
#include <cstdint>
#include <string>

#include "../../common/error.h"

namespace k3::tok {
namespace {

#define K3_WS "\\t\\n\\x{0B}\\f\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"
#define K3_UPPER "(?:(?!\\p{sc:Han})[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}])"
#define K3_LOWER "(?:(?!\\p{sc:Han})[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}])"
#define K3_SUFFIX "(?i:'s|'t|'re|'ve|'m|'ll|'d)?"

constexpr const char kPattern[] =
    "\\p{sc:Han}+"
    "|[^\\r\\n\\p{L}\\p{N}]?" K3_UPPER "*" K3_LOWER "+" K3_SUFFIX
    "|[^\\r\\n\\p{L}\\p{N}]?" K3_UPPER "+" K3_LOWER "*" K3_SUFFIX
    "|\\p{N}{1,3}"
    "| ?[^" K3_WS "\\p{L}\\p{N}]+[\\r\\n]*"
    "|[" K3_WS "]*[\\r\\n]+"
    "|[" K3_WS "]+(?![^" K3_WS "])"
    "|[" K3_WS "]+";

// ASCII character classes as the pattern sees them.
enum : uint8_t { kOther = 0, kUpper, kLower, kDigit, kSpace };
constexpr std::array<uint8_t, 128> MakeClasses() {
  std::array<uint8_t, 128> t{};
  for (int c = 0; c < 128; ++c) {
    uint8_t k = kOther;
    if (c >= 'A' && c <= 'Z') k = kUpper;
    else if (c >= 'a' && c <= 'z') k = kLower;
    else if (c >= '0' && c <= '9') k = kDigit;
    else if ((c >= 0x09 && c <= 0x0D) || c == ' ') k = kSpace;  // Unicode White_Space
    t[c] = k;
  }
  return t;
}
constexpr std::array<uint8_t, 128> kClass = MakeClasses();

constexpr size_t kUnknown = 0;  // the fast path saw a non-ASCII byte it would need

// Class of s[i]; returns false for a non-ASCII byte (caller gives up) and treats the end
// of the subject as class `end_class`.
struct Cursor {
  const uint8_t* s;
  size_t n;
  bool Ascii(size_t i) const { return s[i] < 0x80; }
  uint8_t Cls(size_t i) const { return kClass[s[i]]; }
};

// Optional contraction suffix at i; returns its length, or SIZE_MAX if undecidable.
inline size_t Suffix(const Cursor& c, size_t i) {
  if (i >= c.n || c.s[i] != '\'') return 0;
  if (i + 1 >= c.n) return 0;
  const uint8_t a = c.s[i + 1];
  if (a >= 0x80) return SIZE_MAX;  // could be U+017F, which (?i) folds to 's'
  const uint8_t la = a | 0x20;
  if (la == 's' || la == 't' || la == 'm' || la == 'd') return 2;
  if (la == 'r' || la == 'v' || la == 'l') {
    if (i + 2 >= c.n) return 0;
    const uint8_t b = c.s[i + 2];
    if (b >= 0x80) return SIZE_MAX;
    const uint8_t lb = b | 0x20;
    if ((la == 'r' && lb == 'e') || (la == 'v' && lb == 'e') || (la == 'l' && lb == 'l')) return 3;
  }
  return 0;
}

// The pattern restricted to ASCII: returns the piece length, or kUnknown when the answer
// depends on a non-ASCII character.
size_t FastNext(const Cursor& c, size_t p) {
  const size_t n = c.n;
  const uint8_t k0 = c.Cls(p);
  // A / B: optional non-letter, non-digit, non-newline prefix, then letters.
  {
    size_t q = p;
    if (k0 != kUpper && k0 != kLower) {
      if (k0 != kDigit && c.s[p] != '\r' && c.s[p] != '\n') q = p + 1;
    }
    if (q < n && q > p && !c.Ascii(q)) return kUnknown;
    if (q < n && (c.Cls(q) == kUpper || c.Cls(q) == kLower)) {
      size_t u = q;
      while (u < n && c.Ascii(u) && c.Cls(u) == kUpper) ++u;
      if (u < n && !c.Ascii(u)) return kUnknown;
      size_t l = u;
      while (l < n && c.Ascii(l) && c.Cls(l) == kLower) ++l;
      if (l < n && !c.Ascii(l)) return kUnknown;
      // A needs a lowercase run; B needs an uppercase run. Either way the letters are
      // s[q..l); one of the runs is non-empty because s[q] is a letter.
      const size_t suf = Suffix(c, l);
      if (suf == SIZE_MAX) return kUnknown;
      return l + suf - p;
    }
  }
  // C: 1..3 digits.
  if (k0 == kDigit) {
    size_t q = p + 1;
    while (q < n && q < p + 3) {
      if (!c.Ascii(q)) return kUnknown;  // a non-ASCII \p{N} would extend the run
      if (c.Cls(q) != kDigit) break;
      ++q;
    }
    return q - p;
  }
  // D: optional space, then symbols, then newlines.
  {
    size_t q = p;
    if (c.s[p] == ' ' && p + 1 < n) {
      if (!c.Ascii(p + 1)) return kUnknown;
      if (c.Cls(p + 1) == kOther) q = p + 1;
    }
    if (c.Cls(q) == kOther) {
      while (q < n && c.Ascii(q) && c.Cls(q) == kOther) ++q;
      if (q < n && !c.Ascii(q)) return kUnknown;
      while (q < n && (c.s[q] == '\r' || c.s[q] == '\n')) ++q;
      return q - p;
    }
  }
  // E / F / G: whitespace run s[p..q).
  if (k0 == kSpace) {
    size_t q = p;
    size_t last_nl = SIZE_MAX;
    while (q < n && c.Ascii(q) && c.Cls(q) == kSpace) {
      if (c.s[q] == '\r' || c.s[q] == '\n') last_nl = q;
      ++q;
    }
    if (q < n && !c.Ascii(q)) return kUnknown;  // might be more (non-ASCII) whitespace
    if (last_nl != SIZE_MAX) return last_nl + 1 - p;  // E
    if (q == n) return q - p;                         // F at end of text
    if (q - p >= 2) return q - 1 - p;                 // F leaves one space for the next word
    return 1;                                         // G
  }
  return kUnknown;  // unreachable for ASCII, kept for safety
}

}  // namespace

const char* SplitPattern::Pattern() { return kPattern; }

SplitPattern::SplitPattern() {
  int err = 0;
  PCRE2_SIZE off = 0;
  code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(kPattern), PCRE2_ZERO_TERMINATED,
                        PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK, &err, &off, nullptr);
  if (!code_) {
    PCRE2_UCHAR buf[256];
    pcre2_get_error_message(err, buf, sizeof buf);
    throw RuntimeFailure("tokenizer split pattern does not compile at offset " +
                         std::to_string(off) + ": " + reinterpret_cast<char*>(buf));
  }
  // JIT is an optimisation: if the platform lacks it, pcre2_match interprets.
  pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE);
}

SplitPattern::~SplitPattern() { pcre2_code_free(code_); }

Splitter::Splitter(const SplitPattern& pattern, bool use_fast_path)
    : pattern_(pattern), fast_(use_fast_path) {
  match_ = pcre2_match_data_create_from_pattern(pattern_.code(), nullptr);
  if (!match_) throw RuntimeFailure("tokenizer: out of memory for match data");
}

Splitter::~Splitter() { pcre2_match_data_free(match_); }

size_t Splitter::Next(std::string_view s, size_t p) {
  if (fast_ && static_cast<uint8_t>(s[p]) < 0x80) {
    const Cursor c{reinterpret_cast<const uint8_t*>(s.data()), s.size()};
    const size_t n = FastNext(c, p);
    if (n != kUnknown) return n;
  }
  return NextPcre(s, p);
}

size_t Splitter::NextPcre(std::string_view s, size_t p) {
  // PCRE2_ANCHORED: the piece must start exactly here (tiktoken's find_iter never skips
  // text with this pattern, since every character is covered by some alternative).
  // NO_UTF_CHECK: the caller validated the whole run once; checking per call is O(n^2).
  const int rc = pcre2_match(pattern_.code(), reinterpret_cast<PCRE2_SPTR>(s.data()), s.size(), p,
                             PCRE2_ANCHORED | PCRE2_NO_UTF_CHECK, match_, nullptr);
  if (rc > 0) {
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(match_);
    if (ov[1] > p) return ov[1] - p;
  } else if (rc != PCRE2_ERROR_NOMATCH) {
    throw RuntimeFailure("tokenizer: PCRE2 match failed with code " + std::to_string(rc));
  }
  // Unmatched: one whole character.
  size_t len = 1;
  while (p + len < s.size() && (static_cast<uint8_t>(s[p + len]) & 0xC0) == 0x80) ++len;
  return len;
}

}  // namespace k3::tok
