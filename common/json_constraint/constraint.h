// One request's constrained generation: a compiled schema (matcher + cached masks, shared by
// every request with the same schema) and the ids forced once the value is complete (`after`:
// a chat closes its response channel and message; the last is a stop id). The allowed set at
// each step is a function of the generated ids alone, replayed from the longest prefix already
// seen, so a speculative pass that re-asks an earlier position gets the same answer.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "token_mask.h"

namespace k3::json_constraint {

struct Compiled {
  Compiled(Grammar g, const TokenTrie& trie) : matcher(std::move(g)), masker(trie, matcher) {}
  Matcher matcher;
  TokenMasker masker;
};

// Parses and compiles schema text (ordered: properties keep the document's order); throws
// SchemaError naming what is refused, or on text that is not JSON.
Grammar CompileSchemaText(const std::string& schema_text);

class Constrained {
 public:
  Constrained(std::shared_ptr<Compiled> compiled, const TokenTrie& trie, std::vector<int32_t> after);

  // The logits with every id that may not follow `generated` set to -infinity (V = the
  // logits' length; ids at or above the trie's vocabulary are never allowed). A state with
  // no continuation (a recursive schema cut at kMaxDepth) allows only after.back().
  void Mask(const float* logits, int64_t V, std::span<const int32_t> generated, std::vector<float>& out);
  // True once the value is complete and `after` fully emitted.
  bool Finished(std::span<const int32_t> generated);

 private:
  struct Point {
    int32_t id = -1;     // the id that led here
    State state;
    int32_t after = 0;   // ids of `after` emitted (0: still in the value)
    bool dead = false;   // an id the matcher refused (only after the depth fallback)
  };
  void Sync(std::span<const int32_t> generated);
  Point Advance(const Point& from, int32_t id) const;

  std::shared_ptr<Compiled> c_;
  const TokenTrie& trie_;
  std::vector<int32_t> after_;
  std::vector<Point> points_;  // points_[n]: after the first n generated ids
};

}  // namespace k3::json_constraint
