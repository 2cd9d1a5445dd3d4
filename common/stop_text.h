// Stop strings (k3-launch --stop TEXT, k3-server's "stop"): finds them in the generated text
// as it is decoded, across token boundaries. Text that could still be the start of a stop string is held back until the
// next text decides it, so what Feed returns is final: it never contains a stop string or
// anything after one.
//
// Works on bytes. The tokenizer client hands over whole UTF-8 characters and a stop string
// starts with a whole character, so the text held back and the text returned are whole
// characters too.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace k3 {

class StopTextMatcher {
 public:
  explicit StopTextMatcher(std::vector<std::string> stops);  // empty strings are ignored

  // Appends decoded text; returns the text that is now certain to show (the empty string
  // after a match).
  std::string Feed(std::string_view text);
  // No more text: returns what was held back (nothing after a match).
  std::string Finish();

  bool matched() const { return matched_; }
  const std::string& matched_stop() const { return matched_stop_; }  // "" before a match
  size_t held_bytes() const { return held_.size(); }

 private:
  std::vector<std::string> stops_;
  std::string held_;  // a suffix that is a proper prefix of some stop string
  bool matched_ = false;
  std::string matched_stop_;
};

}  // namespace k3
