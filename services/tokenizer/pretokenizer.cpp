#include "pretokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <string>

#include "common/error.h"

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

// The first matcher tried at an ASCII position: the pattern restricted to ASCII bytes (most
// code and English), cheaper than the code-point walk below; it gives up (kUnknown) as soon
// as a non-ASCII character could change the piece.
namespace ascii {

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

constexpr size_t kUnknown = 0;  // saw a non-ASCII byte it would need

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
size_t Next(const Cursor& c, size_t p) {
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


}  // namespace ascii

// Class bits of one code point, as the pattern's character classes see it.
enum : uint8_t {
  kHan = 1,     // \p{sc:Han}
  kLetter = 2,  // \p{L}
  kNumber = 4,  // \p{N}
  kUpper = 8,   // K3_UPPER: [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}] and not Han
  kLower = 16,  // K3_LOWER: [\p{Ll}\p{Lm}\p{Lo}\p{M}] and not Han
  kSpace = 32,  // White_Space (the pattern's spelled-out \s)
  kKnown = 128  // the entry has been computed
};
// ASCII classes written out, so the hot path needs no table lookup through the pattern; the
// constructor checks them against what PCRE2 says.
constexpr std::array<uint8_t, 128> MakeAsciiClasses() {
  std::array<uint8_t, 128> t{};
  for (int c = 0; c < 128; ++c) {
    uint8_t k = kKnown;
    if (c >= 'A' && c <= 'Z') k |= kLetter | kUpper;
    else if (c >= 'a' && c <= 'z') k |= kLetter | kLower;
    else if (c >= '0' && c <= '9') k |= kNumber;
    else if ((c >= 0x09 && c <= 0x0D) || c == ' ') k |= kSpace;
    t[c] = k;
  }
  return t;
}
constexpr std::array<uint8_t, 128> kAscii = MakeAsciiClasses();

// The single-character pattern that decides each bit, in bit order.
constexpr const char* kProbes[] = {"\\p{sc:Han}", "\\p{L}", "\\p{N}", K3_UPPER, K3_LOWER, "[" K3_WS "]"};

constexpr uint32_t kCodePoints = 0x110000;
constexpr uint32_t kOptions = PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK | PCRE2_ANCHORED;

pcre2_code* Compile(const char* pattern) {
  int err = 0;
  PCRE2_SIZE off = 0;
  // PCRE2_ANCHORED at compile time: passed only to pcre2_match it disables the JIT
  // (pcre2jit(3)).
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern), PCRE2_ZERO_TERMINATED, kOptions, &err,
                                   &off, nullptr);
  if (!code) {
    PCRE2_UCHAR buf[256];
    pcre2_get_error_message(err, buf, sizeof buf);
    throw RuntimeFailure("tokenizer split pattern does not compile at offset " + std::to_string(off) + ": " +
                         reinterpret_cast<char*>(buf));
  }
  // JIT is an optimisation: if the platform lacks it, pcre2_match interprets.
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  return code;
}

size_t PutUtf8(uint32_t cp, char* out) {
  if (cp < 0x80) {
    out[0] = static_cast<char>(cp);
    return 1;
  }
  if (cp < 0x800) {
    out[0] = static_cast<char>(0xC0 | (cp >> 6));
    out[1] = static_cast<char>(0x80 | (cp & 63));
    return 2;
  }
  if (cp < 0x10000) {
    out[0] = static_cast<char>(0xE0 | (cp >> 12));
    out[1] = static_cast<char>(0x80 | ((cp >> 6) & 63));
    out[2] = static_cast<char>(0x80 | (cp & 63));
    return 3;
  }
  out[0] = static_cast<char>(0xF0 | (cp >> 18));
  out[1] = static_cast<char>(0x80 | ((cp >> 12) & 63));
  out[2] = static_cast<char>(0x80 | ((cp >> 6) & 63));
  out[3] = static_cast<char>(0x80 | (cp & 63));
  return 4;
}

// Decodes the well-formed character at s[i] (the caller validated the run).
inline uint32_t DecodeAt(const uint8_t* s, size_t i, size_t* len) {
  const uint8_t b = s[i];
  if (b < 0xE0) {
    *len = 2;
    return (uint32_t{b & 0x1Fu} << 6) | (s[i + 1] & 0x3Fu);
  }
  if (b < 0xF0) {
    *len = 3;
    return (uint32_t{b & 0x0Fu} << 12) | ((s[i + 1] & 0x3Fu) << 6) | (s[i + 2] & 0x3Fu);
  }
  *len = 4;
  return (uint32_t{b & 0x07u} << 18) | ((s[i + 1] & 0x3Fu) << 12) | ((s[i + 2] & 0x3Fu) << 6) | (s[i + 3] & 0x3Fu);
}

constexpr size_t kUndecided = 0;

// Optional contraction suffix (?i:'s|'t|'re|'ve|'m|'ll|'d) at i: its length, or SIZE_MAX
// when a non-ASCII character follows the apostrophe (U+017F folds to 's'; PCRE2 decides).
inline size_t Suffix(const uint8_t* s, size_t n, size_t i) {
  if (i + 1 >= n || s[i] != '\'') return 0;
  const uint8_t a = s[i + 1];
  if (a >= 0x80) return SIZE_MAX;
  const uint8_t la = a | 0x20;
  if (la == 's' || la == 't' || la == 'm' || la == 'd') return 2;
  if (la == 'r' || la == 'v' || la == 'l') {
    if (i + 2 >= n) return 0;
    const uint8_t b = s[i + 2];
    if (b >= 0x80) return SIZE_MAX;
    const uint8_t lb = b | 0x20;
    if ((la == 'r' && lb == 'e') || (la == 'v' && lb == 'e') || (la == 'l' && lb == 'l')) return 3;
  }
  return 0;
}

}  // namespace

const char* SplitPattern::Pattern() { return kPattern; }

SplitPattern::SplitPattern() : classes_(kCodePoints, 0) {
  code_ = Compile(kPattern);
  for (const char* p : kProbes) probes_.push_back(Compile(p));
  for (uint32_t cp = 0; cp < 0x100; ++cp) classes_[cp] = Probe(cp);  // Latin-1 up front: it is hot
  for (uint32_t cp = 0; cp < 0x80; ++cp)
    if (classes_[cp] != kAscii[cp])
      throw RuntimeFailure("tokenizer: ASCII class table disagrees with PCRE2 at " + std::to_string(cp));
}

SplitPattern::~SplitPattern() {
  pcre2_code_free(code_);
  for (pcre2_code* p : probes_) pcre2_code_free(p);
}

size_t SplitPattern::JitSize() const {
  size_t size = 0;
  if (pcre2_pattern_info(code_, PCRE2_INFO_JITSIZE, &size) != 0) return 0;
  return size;
}

uint8_t SplitPattern::Probe(uint32_t cp) const {
  char buf[4];
  const size_t len = PutUtf8(cp, buf);
  uint8_t bits = kKnown;
  // Surrogates are not characters (never in validated text); leave them classless.
  if (cp >= 0xD800 && cp <= 0xDFFF) return bits;
  for (size_t b = 0; b < probes_.size(); ++b) {
    pcre2_match_data* md = pcre2_match_data_create_from_pattern(probes_[b], nullptr);
    if (!md) throw RuntimeFailure("tokenizer: out of memory for match data");
    const int rc = pcre2_match(probes_[b], reinterpret_cast<PCRE2_SPTR>(buf), len, 0, PCRE2_NO_UTF_CHECK, md, nullptr);
    pcre2_match_data_free(md);
    if (rc > 0) bits |= static_cast<uint8_t>(1u << b);
    else if (rc != PCRE2_ERROR_NOMATCH)
      throw RuntimeFailure("tokenizer: PCRE2 match failed with code " + std::to_string(rc));
  }
  return bits;
}

uint8_t SplitPattern::Class(uint32_t cp) const {
  std::atomic_ref<uint8_t> slot(classes_[cp]);
  uint8_t c = slot.load(std::memory_order_relaxed);
  if (c == 0) {
    c = Probe(cp);
    slot.store(c, std::memory_order_relaxed);
  }
  return c;
}

Splitter::Splitter(const SplitPattern& pattern, bool use_fast_path) : pattern_(pattern), fast_(use_fast_path) {
  match_ = pcre2_match_data_create_from_pattern(pattern_.code(), nullptr);
  if (!match_) throw RuntimeFailure("tokenizer: out of memory for match data");
}

Splitter::~Splitter() { pcre2_match_data_free(match_); }

// The pattern's alternatives in order, with PCRE2's backtracking worked out per alternative
// (see the comments); every class test reads SplitPattern::Class.
size_t Splitter::FastNext(const uint8_t* s, size_t n, size_t p) const {
  const SplitPattern& pat = pattern_;
  // Class and byte length of the character at i (i < n).
  auto at = [&](size_t i, size_t* len) -> uint8_t {
    if (s[i] < 0x80) {
      *len = 1;
      return kAscii[s[i]];
    }
    return pat.Class(DecodeAt(s, i, len));
  };
  // End of the run of characters from i that have any of `bits`.
  auto run = [&](size_t i, uint8_t bits) {
    size_t len = 0;
    while (i < n && (at(i, &len) & bits)) i += len;
    return i;
  };
  auto is_nl = [&](size_t i) { return s[i] == '\r' || s[i] == '\n'; };
  if (s[p] < 0x80) {
    const size_t len = ascii::Next(ascii::Cursor{s, n}, p);
    if (len != ascii::kUnknown) return len;
  }
  size_t len0 = 0;
  const uint8_t c0 = at(p, &len0);

  // H: \p{Han}+
  if (c0 & kHan) return run(p, kHan) - p;

  // A and B share the optional prefix [^\r\n\p{L}\p{N}]; PCRE2 tries A with the prefix,
  // A without, B with, B without.
  const bool prefix = !(c0 & (kLetter | kNumber)) && !is_nl(p) && p + len0 < n;
  auto finish = [&](size_t end) -> size_t {  // + the optional contraction suffix
    const size_t suf = Suffix(s, n, end);
    return suf == SIZE_MAX ? kUndecided : end + suf - p;
  };
  // A: U* L+. Greedy U* takes the whole U-run; if the next character is in L, L+ runs
  // from there; otherwise U* gives back characters until one is in L too (U and L share
  // Lm, Lo, M), and L+ takes just that one (the rest of the U-run is not in L).
  auto try_a = [&](size_t q) -> size_t {
    size_t i = q, last_lower_end = 0, len = 0;
    uint8_t c = 0;
    while (i < n && ((c = at(i, &len)) & kUpper)) {
      if (c & kLower) last_lower_end = i + len;
      i += len;
    }
    if (i < n && (c & kLower)) return run(i, kLower);
    return last_lower_end;  // 0: no match
  };
  // B: U+ L*.
  auto try_b = [&](size_t q) -> size_t {
    const size_t u = run(q, kUpper);
    return u == q ? 0 : run(u, kLower);
  };
  if (prefix) {
    if (size_t e = try_a(p + len0)) return finish(e);
  }
  if (size_t e = try_a(p)) return finish(e);
  if (prefix) {
    if (size_t e = try_b(p + len0)) return finish(e);
  }
  if (size_t e = try_b(p)) return finish(e);

  // C: \p{N}{1,3}
  if (c0 & kNumber) {
    size_t i = p + len0, len = 0;
    for (int k = 1; k < 3 && i < n && (at(i, &len) & kNumber); ++k) i += len;
    return i - p;
  }

  // D: " ?[^\s\p{L}\p{N}]+[\r\n]*"
  constexpr uint8_t kNotOther = kSpace | kLetter | kNumber;
  {
    size_t q = p;
    if (s[p] == ' ' && p + 1 < n) {
      size_t len = 0;
      if (!(at(p + 1, &len) & kNotOther)) q = p + 1;
    }
    size_t len = 0;
    if (q < n && !(at(q, &len) & kNotOther)) {
      size_t i = q;
      while (i < n && !(at(i, &len) & kNotOther)) i += len;
      while (i < n && is_nl(i)) ++i;
      return i - p;
    }
  }

  // E / F / G on the White_Space run s[p..end).
  if (c0 & kSpace) {
    size_t i = p, len = 0, last_nl_end = 0, last_start = p, chars = 0;
    while (i < n && (at(i, &len) & kSpace)) {
      if (is_nl(i)) last_nl_end = i + 1;
      last_start = i;
      i += len;
      ++chars;
    }
    if (last_nl_end) return last_nl_end - p;  // E: \s*[\r\n]+ ends at the last newline
    if (i == n) return i - p;                 // F at the end of the text
    if (chars >= 2) return last_start - p;    // F: (?!\S) leaves the last one for the next piece
    return i - p;                             // G
  }
  return kUndecided;  // unreachable: every character is in some alternative
}

size_t Splitter::NextPcre(std::string_view s, size_t p) {
  // The pattern is compiled anchored: the piece starts exactly here (tiktoken's find_iter
  // never skips text with this pattern, since every character is covered by some
  // alternative). NO_UTF_CHECK: the caller validated the whole run once; per call is O(n^2).
  const int rc = pcre2_match(pattern_.code(), reinterpret_cast<PCRE2_SPTR>(s.data()), s.size(), p,
                             PCRE2_NO_UTF_CHECK, match_, nullptr);
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
