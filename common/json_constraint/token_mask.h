// Which token ids a matcher state allows: a trie of the vocabulary's byte strings is walked
// from the state, a subtree dropped at the first byte the matcher refuses, so the cost is the
// number of trie nodes still possible rather than vocabulary x token length. Inside an ordinary
// string a plain ASCII byte leaves the state unchanged (Matcher::Unchanged): no copy, and a
// subtree of only such bytes is allowed whole. Masks are cached per state (a pure function of
// it, so the cache never changes a result).
//
// A state inside an ordinary string allows nearly every id, so its walk would visit most of the
// trie (every UTF-8 subtree): its mask is split into the ids that stay inside the string, a
// function of the string frame's own fields alone (Matcher::InteriorKey), computed once per
// trie and shared by every schema and state, and the ids holding a '"' (the only byte that can
// close the string), walked from the state through the subtrees that hold one.
#pragma once
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "matcher.h"

namespace k3::json_constraint {

class TokenTrie {
 public:
  // tokens[id]: the id's bytes; empty: never allowed by a mask (special tokens, unused ids).
  explicit TokenTrie(std::vector<std::string> tokens);
  int64_t vocab() const { return static_cast<int64_t>(tokens_.size()); }
  const std::string& bytes(int32_t id) const { return tokens_[static_cast<size_t>(id)]; }
  size_t nodes() const { return byte_.size(); }

 private:
  friend class TokenMasker;
  static constexpr uint32_t kNone = UINT32_MAX;
  std::vector<std::string> tokens_;
  // Nodes in preorder (0 the root): a subtree is [n, subtree_end_[n]); its ids are
  // ids_[ids_begin_[n] .. ids_begin_[subtree_end_[n]]), its own ids up to ids_begin_[n + 1].
  std::vector<uint8_t> byte_;
  std::vector<uint32_t> first_child_, next_sibling_, subtree_end_, ids_begin_;
  std::vector<uint8_t> plain_below_;  // every byte below this node is a PlainStringByte
  std::vector<uint8_t> quote_here_or_below_;  // this node's byte or one below it is '"'
  std::vector<int32_t> ids_;
  size_t max_len_ = 0;
  // The string interiors' masks (TokenMasker), by Matcher::InteriorKey: shared by the schemas.
  mutable std::mutex interior_mu_;
  mutable std::unordered_map<std::string, std::vector<uint64_t>> interior_;
};

class TokenMasker {
 public:
  TokenMasker(const TokenTrie& trie, const Matcher& matcher, size_t cache_bytes = size_t{64} << 20);
  // Bit i (of trie.vocab()) set when id i's bytes are accepted from s. Valid until the next call.
  const std::vector<uint64_t>& Allowed(const State& s);
  // The same by walking the whole trie from s (no interior split): the reference of the tests.
  std::vector<uint64_t> AllowedByFullWalk(const State& s);
  // false: string states walk the whole trie too (the old way; k3-bench-structured's baseline).
  void set_string_split(bool on) { string_split_ = on; }
  int64_t hits() const { return hits_; }
  int64_t misses() const { return misses_; }

 private:
  // mode kAll: every id; kInterior: the ids that leave the string (of `frames` frames) open;
  // kClosing: the ids holding a '"' (subtrees without one skipped), all ids once it closed.
  enum class Mode { kAll, kInterior, kClosing };
  void Walk(uint32_t node, const State* s, size_t depth, std::vector<uint64_t>& bits, Mode mode, size_t frames);
  const std::vector<uint64_t>& Interior(const State& s);
  void SetIds(uint32_t begin, uint32_t end, std::vector<uint64_t>& bits) const;

  const TokenTrie& trie_;
  const Matcher& matcher_;
  size_t cache_limit_;
  std::vector<State> levels_;
  std::unordered_map<std::string, std::vector<uint64_t>> cache_;
  std::vector<uint64_t> scratch_;
  int64_t hits_ = 0, misses_ = 0;
  bool string_split_ = true;
};

// Computes the trie's shared interior mask of an ordinary string at a character boundary (the
// state after its opening quote, the one nearly every string state has), so that no request's
// first string state pays for the walk. Changes no mask (they are equal with or without it).
void WarmStringInterior(const TokenTrie& trie);

inline bool Bit(const std::vector<uint64_t>& bits, int64_t i) { return (bits[static_cast<size_t>(i) >> 6] >> (i & 63)) & 1; }

}  // namespace k3::json_constraint
