// A small self-contained vocabulary for the tokenizer unit tests: the 256 single bytes
// (rank = byte value), a few multi-byte merges, and the K3 added tokens right after the ranks.
#pragma once
#include <string>
#include <vector>

#include "base64.h"
#include "tokenizer.h"

namespace k3::tok::testing {

inline const std::vector<std::string>& TestMerges() {
  static const std::vector<std::string> m = {
      "ab", "bc", "aa", "he", "ll", "llo", "hello", " w", "or", "ld", " world", "message", " role",
      "=\"", "system", "user", "assistant", "think", "response", " type", "thinking", "-effort",
      "th", "in", "ing", "er", "re", " t", "en", "on", "es", "  ", "    ", "\n\n", "\xe4\xbd", "\xe4\xbd\xa0"};
  return m;
}

inline std::string TestModelText() {
  std::string s;
  for (int b = 0; b < 256; ++b) s += Base64Encode(std::string(1, static_cast<char>(b))) + " " + std::to_string(b) + "\n";
  int r = 256;
  for (const auto& m : TestMerges()) s += Base64Encode(m) + " " + std::to_string(r++) + "\n";
  return s;
}

inline uint32_t TestNumRanks() { return 256 + static_cast<uint32_t>(TestMerges().size()); }

inline std::string TestConfigText() {
  const char* names[] = {"[BOS]", "[EOS]", "<|end_of_msg|>", "<|open|>", "<|close|>", "<|sep|>"};
  std::string s = "{\"added_tokens_decoder\": {";
  const uint32_t n = TestNumRanks();
  // Appended piecewise: GCC 12 warns (-Wrestrict, falsely) on "literal" + std::string&&.
  auto entry = [&](uint32_t id, const char* content) {
    s.append("\"").append(std::to_string(id)).append("\": {\"content\": \"").append(content);
    s.append("\", \"special\": true}");
  };
  for (int k = 0; k < 6; ++k) {
    if (k) s += ",";
    entry(n + k, names[k]);
  }
  s += ", ";
  entry(n + 255, "[PAD]");
  s += "}}";
  return s;
}

inline const Tokenizer& TestTokenizer() {
  static const Tokenizer t(Vocab::Parse(TestModelText(), TestConfigText(), "tiktoken.model", "tokenizer_config.json"));
  return t;
}

}  // namespace k3::tok::testing
