// Rank-based byte-pair merging of one pre-tokenized piece (tiktoken semantics): start from
// single bytes, repeatedly merge the adjacent pair whose concatenation has the lowest rank
// (leftmost on ties) until no adjacent pair is a token.
#pragma once
#include <cstdint>
#include <string_view>
#include <vector>

#include "rank_table.h"

namespace k3::tok {

// Appends the ranks of `piece` to *out. A piece that is itself a token becomes that token
// (tiktoken's shortcut, required for parity). Every single byte must be in `ranks`.
void BpeEncode(const RankTable& ranks, std::string_view piece, std::vector<uint32_t>* out);

// The merges alone, for a piece known not to be one token (picks the strategy by length).
// `Ranks` is `const RankTable` or `CachedRanks` (the encoder's per-call memo); both are
// instantiated in bpe.cpp.
template <class Ranks>
void BpeMerge(Ranks& ranks, std::string_view piece, std::vector<uint32_t>* out);

// The two merge strategies, exposed so tests can check that they agree: a linear rescan
// (fast for short pieces) and a heap over a linked list (O(n log n) for long runs).
template <class Ranks>
void BpeMergeLinear(Ranks& ranks, std::string_view piece, std::vector<uint32_t>* out);
template <class Ranks>
void BpeMergeHeap(Ranks& ranks, std::string_view piece, std::vector<uint32_t>* out);

}  // namespace k3::tok
