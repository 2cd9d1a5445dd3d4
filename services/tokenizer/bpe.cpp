#include "bpe.h"

#include <algorithm>
#include <functional>
#include <utility>

namespace k3::tok {
namespace {

// Pieces longer than this use the heap; below it the rescan's locality wins (measured with
// callgrind on Cyrillic, Greek, Japanese and Korean text, where pieces are long).
constexpr size_t kHeapThreshold = 32;
// The linear rescan's stack buffers.
constexpr size_t kLinearMax = 128;

}  // namespace

template <class Ranks>
void BpeMergeLinear(Ranks& ranks, std::string_view piece, std::vector<uint32_t>* out) {
  const uint32_t n = static_cast<uint32_t>(piece.size());
  // Parts are a list over start bytes: next[i] is the start of the part after the one at i
  // (n = end), rank[i] the rank of that part merged with the next (kNoRank: not a token).
  // A merge relinks instead of shifting arrays; the rescan walks live parts only.
  // token[i] is the rank of the part itself (the merge that made it), so the output needs
  // no lookups.
  uint32_t next_buf[kLinearMax + 1];
  uint32_t rank_buf[kLinearMax + 1];
  uint32_t token_buf[kLinearMax + 1];
  std::vector<uint32_t> next_vec, rank_vec, token_vec;
  uint32_t* next = next_buf;
  uint32_t* rank = rank_buf;
  uint32_t* token = token_buf;
  if (n > kLinearMax) {
    next_vec.resize(n + 1);
    rank_vec.resize(n + 1);
    token_vec.resize(n + 1);
    next = next_vec.data();
    rank = rank_vec.data();
    token = token_vec.data();
  }
  const char* p = piece.data();
  for (uint32_t i = 0; i < n; ++i) next[i] = i + 1;
  auto pair_rank = [&](uint32_t i) -> uint32_t {
    const uint32_t j = next[i];
    return j >= n ? kNoRank : ranks.Find(p + i, next[j] - i);
  };
  for (uint32_t i = 0; i < n; ++i) {
    rank[i] = i + 1 < n ? ranks.Find(p + i, 2) : kNoRank;
    token[i] = ranks.ByteRank(static_cast<uint8_t>(p[i]));
  }
  for (;;) {
    uint32_t best = kNoRank, at = n, before = n;
    for (uint32_t i = 0, prev = n; i < n; prev = i, i = next[i])
      if (rank[i] < best) {  // strict: leftmost on ties
        best = rank[i];
        at = i;
        before = prev;
      }
    if (best == kNoRank) break;
    next[at] = next[next[at]];
    token[at] = best;
    rank[at] = pair_rank(at);
    if (before < n) rank[before] = pair_rank(before);
  }
  for (uint32_t i = 0; i < n; i = next[i]) out->push_back(token[i]);
}

template <class Ranks>
void BpeMergeHeap(Ranks& ranks, std::string_view piece, std::vector<uint32_t>* out) {
  const uint32_t n = static_cast<uint32_t>(piece.size());
  // Part i starts at byte i while alive; next[i] is the following live part (n = end).
  // Pieces up to kStackPiece bytes keep everything on the stack (no allocation per piece).
  constexpr uint32_t kStackPiece = 256;
  uint32_t next_b[kStackPiece], prev_b[kStackPiece], rank_b[kStackPiece], token_b[kStackPiece];
  uint8_t alive_b[kStackPiece];
  uint64_t heap_b[3 * kStackPiece];
  std::vector<uint32_t> next_v, prev_v, rank_v, token_v;
  std::vector<uint8_t> alive_v;
  std::vector<uint64_t> heap_v;
  uint32_t *next = next_b, *prev = prev_b, *rank = rank_b, *token = token_b;
  uint8_t* alive = alive_b;
  uint64_t* heap = heap_b;
  if (n > kStackPiece) {
    next_v.resize(n), prev_v.resize(n), rank_v.resize(n), token_v.resize(n), alive_v.resize(n);
    heap_v.resize(3 * size_t{n});
    next = next_v.data(), prev = prev_v.data(), rank = rank_v.data(), token = token_v.data();
    alive = alive_v.data(), heap = heap_v.data();
  }
  for (uint32_t i = 0; i < n; ++i) {
    next[i] = i + 1;
    prev[i] = i == 0 ? n : i - 1;  // n = none
    alive[i] = 1;
    token[i] = ranks.ByteRank(static_cast<uint8_t>(piece[i]));
  }
  auto pair_rank = [&](uint32_t i) -> uint32_t {
    const uint32_t j = next[i];
    if (j >= n) return kNoRank;
    return ranks.Find(piece.data() + i, next[j] - i);
  };
  // Key = rank << 32 | start byte; the start byte is also the part's index, and ordering by
  // it breaks rank ties leftmost as the rescan does. Min-heap; at most n initial entries
  // plus two per merge (< n merges), so 3n bounds it.
  size_t size = 0;
  auto push = [&](uint32_t i) {
    rank[i] = pair_rank(i);
    if (rank[i] != kNoRank) {
      heap[size++] = (uint64_t{rank[i]} << 32) | i;
      std::push_heap(heap, heap + size, std::greater<uint64_t>());
    }
  };
  for (uint32_t i = 0; i < n; ++i) push(i);
  while (size > 0) {
    std::pop_heap(heap, heap + size, std::greater<uint64_t>());
    const uint64_t key = heap[--size];
    const uint32_t i = static_cast<uint32_t>(key);
    // Stale entries: the part died or its pair changed since this entry was pushed.
    if (!alive[i] || rank[i] != static_cast<uint32_t>(key >> 32)) continue;
    const uint32_t j = next[i];
    alive[j] = 0;
    token[i] = rank[i];  // the merged part is the token the pair's rank names
    next[i] = next[j];
    if (next[j] < n) prev[next[j]] = i;
    push(i);
    if (prev[i] < n) push(prev[i]);
  }
  for (uint32_t i = 0; i < n; i = next[i]) out->push_back(token[i]);
}

void BpeEncode(const RankTable& ranks, std::string_view piece, std::vector<uint32_t>* out) {
  const uint32_t whole = ranks.Find(piece);
  if (whole != kNoRank) {
    out->push_back(whole);
    return;
  }
  BpeMerge(ranks, piece, out);
}

template <class Ranks>
void BpeMerge(Ranks& ranks, std::string_view piece, std::vector<uint32_t>* out) {
  if (piece.size() <= kHeapThreshold)
    BpeMergeLinear(ranks, piece, out);
  else
    BpeMergeHeap(ranks, piece, out);
}

template void BpeMerge(const RankTable&, std::string_view, std::vector<uint32_t>*);
template void BpeMerge(CachedRanks&, std::string_view, std::vector<uint32_t>*);
template void BpeMergeLinear(const RankTable&, std::string_view, std::vector<uint32_t>*);
template void BpeMergeLinear(CachedRanks&, std::string_view, std::vector<uint32_t>*);
template void BpeMergeHeap(const RankTable&, std::string_view, std::vector<uint32_t>*);
template void BpeMergeHeap(CachedRanks&, std::string_view, std::vector<uint32_t>*);

}  // namespace k3::tok
