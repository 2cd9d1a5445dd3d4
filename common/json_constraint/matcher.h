// A byte-level pushdown matcher for one JSON value of a Grammar (schema.h): the state is a
// set of stacks (more than one only while anyOf alternatives share a prefix), each a stack of
// small frames (the containers open, the string, number or literal in progress). Output is
// compact: no whitespace between tokens. Strings must be valid UTF-8; \u escapes exclude
// U+D000..U+DFFF (no surrogate pairs; those characters are written as UTF-8). Numbers have at
// most 16 digits before and after the point and 2 in the exponent, so a value always ends and
// fits a double.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "schema.h"

namespace k3::json_constraint {

// One open value. Plain bytes (no padding): states compare and hash as bytes.
struct Frame {
  int32_t node = -1;  // grammar node; -1 the root sentinel
  uint8_t phase = 0;
  uint8_t need = 0, lo = 0, hi = 0;  // string: UTF-8 continuation bytes expected and the next one's range
  int32_t i = 0;  // object: last property index produced (-1 none); array: items begun; number: digits in this part; uuid: chars
  int32_t j = 0;  // object key or literal: the first candidate consistent with the bytes so far
  int32_t k = 0;  // object key or literal: bytes matched
};
static_assert(sizeof(Frame) == 20, "Frame must have no padding");

struct State {
  std::vector<Frame> frames;   // the stacks, one after another
  std::vector<uint32_t> ends;  // where each stack ends in `frames`
  bool operator==(const State& o) const;
  std::string Key() const;     // the bytes of both vectors
};

class Matcher {
 public:
  explicit Matcher(Grammar g);
  const Grammar& grammar() const { return g_; }

  State Start() const;
  // dst = src after byte b; false when no stack accepts it (dst then empty). dst != &src.
  bool Feed(const State& src, uint8_t b, State& dst) const;
  // True when the bytes so far are one whole value (it may still go on: a number's digits).
  bool Accepting(const State& s) const;
  // True when Feed(s, b) would give s itself (a plain character inside an ordinary string).
  bool Unchanged(const State& s, uint8_t b) const;
  // True when s is one stack whose top is an ordinary string (no format) past its opening
  // quote: until a '"' closes it, every byte's fate depends on that frame's own fields alone.
  bool InPlainString(const State& s) const;
  // That frame's fields without its node (every ordinary string reads bytes alike): what the
  // string interior allows is a function of this key.
  static std::string InteriorKey(const State& s);

 private:
  enum class Step { kConsumed, kReject, kDone, kDoneRefeed, kValue };
  Step StepFrame(std::vector<Frame>& f, uint8_t b, int32_t* value_node) const;
  bool StepStack(std::vector<Frame>& f, size_t base, uint8_t b, int32_t* value_node, bool* value) const;
  Frame Fresh(int32_t node) const;
  bool LazyAccepting(const Frame& f) const;

  Grammar g_;
};

// The JSON text plain ASCII never changes a string state with: printable, not '"' or '\'.
inline bool PlainStringByte(uint8_t b) { return b >= 0x20 && b < 0x7f && b != '"' && b != '\\'; }

}  // namespace k3::json_constraint
