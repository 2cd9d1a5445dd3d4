// The Kimi pre-tokenizer: splits well-formed UTF-8 text into pieces that BPE encodes
// independently. Alternatives of the released Kimi tokenizer's pat_str (docs/tokenizer.md),
// tried in order at each position:
//   H  \p{Han}+
//   A  [^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?
//   B  [^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?
//   C  \p{N}{1,3}
//   D   ?[^\s\p{L}\p{N}]+[\r\n]*
//   E  \s*[\r\n]+
//   F  \s+(?!\S)
//   G  \s+
// PCRE2 has no class intersection, so X&&[^\p{Han}] becomes (?:(?!\p{sc:Han})X); \p{Han}
// is written \p{sc:Han} because PCRE2 >= 10.40 reads \p{Han} as Script_Extensions (which
// would take U+3002 and other shared CJK punctuation), while the reference means Script;
// and \s is spelled out as Unicode White_Space (Rust's \s; PCRE2's \s differs on U+0085).
//
// Speed: a hand-written matcher walks the alternatives above over code points, using a
// per-code-point class byte (Han, L, N, the two letter sets, White_Space) that PCRE2 itself
// computes the first time a code point is seen, so both paths read the same Unicode tables.
// It hands the rare positions it does not decide (a non-ASCII character after an apostrophe,
// where (?i) folding matters) to PCRE2, compiled anchored so that its JIT runs.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

struct pcre2_real_code_8;
struct pcre2_real_match_data_8;
struct pcre2_real_jit_stack_8;

namespace k3::tok {

// The compiled pattern; immutable and shareable between threads.
class SplitPattern {
 public:
  SplitPattern();
  ~SplitPattern();
  SplitPattern(const SplitPattern&) = delete;
  SplitPattern& operator=(const SplitPattern&) = delete;
  pcre2_real_code_8* code() const { return code_; }
  // The pattern text given to PCRE2 (for docs and tests).
  static const char* Pattern();
  // Bytes of JIT code PCRE2 built for the pattern (0: the interpreter runs).
  size_t JitSize() const;

  // Class bits of code point `cp` (see kClass* in pretokenizer.cpp); computed by PCRE2 on
  // first use and remembered. Thread-safe: racing threads store the same value.
  uint8_t Class(uint32_t cp) const;

 private:
  uint8_t Probe(uint32_t cp) const;

  pcre2_real_code_8* code_ = nullptr;
  std::vector<pcre2_real_code_8*> probes_;  // one single-character pattern per class bit
  mutable std::vector<uint8_t> classes_;     // 0 = not yet computed; read/written atomically
};

// Per-call matching state (PCRE2 match data); one per thread.
class Splitter {
 public:
  // use_fast_path=false forces PCRE2 everywhere (tests compare both).
  explicit Splitter(const SplitPattern& pattern, bool use_fast_path = true);
  ~Splitter();
  Splitter(const Splitter&) = delete;
  Splitter& operator=(const Splitter&) = delete;

  // Length of the piece starting at s[p] (p < s.size()); s must be well-formed UTF-8.
  // Always >= 1: a position no alternative matches yields one character (cannot happen
  // with this pattern, but keeps decode(encode(x)) == x unconditional).
  size_t Next(std::string_view s, size_t p) {
    if (fast_) {
      const size_t n = FastNext(reinterpret_cast<const uint8_t*>(s.data()), s.size(), p);
      if (n != 0) return n;
    }
    return NextPcre(s, p);
  }

  template <typename F>
  void Split(std::string_view s, F&& on_piece) {
    size_t p = 0;
    while (p < s.size()) {
      const size_t n = Next(s, p);
      on_piece(s.substr(p, n));
      p += n;
    }
  }

 private:
  size_t NextPcre(std::string_view s, size_t p);
  // The pattern walked by hand; 0 when PCRE2 must decide.
  size_t FastNext(const uint8_t* s, size_t n, size_t p) const;

  const SplitPattern& pattern_;
  pcre2_real_match_data_8* match_ = nullptr;
  bool fast_;
};

}  // namespace k3::tok
