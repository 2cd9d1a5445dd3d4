// Helpers of the json_constraint tests: feed whole texts through a matcher.
#pragma once
#include <string>

#include "common/json_constraint/constraint.h"

namespace k3::json_constraint::testing {

inline Matcher MatcherFor(const std::string& schema) { return Matcher(CompileSchemaText(schema)); }

// True when `text` is accepted byte by byte and is then one whole value.
inline bool Accepts(const Matcher& m, const std::string& text) {
  State s = m.Start(), next;
  for (char c : text) {
    if (!m.Feed(s, static_cast<uint8_t>(c), next)) return false;
    std::swap(s, next);
  }
  return m.Accepting(s);
}

}  // namespace k3::json_constraint::testing
