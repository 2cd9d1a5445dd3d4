#include "bpe.h"

#include <queue>
#include <utility>

namespace k3::tok {
namespace {

// Pieces longer than this use the heap; below it the rescan's locality wins.
constexpr size_t kHeapThreshold = 128;

}  // namespace

void BpeMergeLinear(const RankTable& ranks, std::string_view piece, std::vector<uint32_t>* out) {
  const size_t n = piece.size();
  // starts[i] = byte offset of part i; starts[parts] = n. pair[i] = rank of parts i and i+1.
  uint32_t starts_buf[kHeapThreshold + 1];
  uint32_t pair_buf[kHeapThreshold];
  std::vector<uint32_t> starts_vec, pair_vec;
  uint32_t* starts = starts_buf;
  uint32_t* pair = pair_buf;
  if (n > kHeapThreshold) {
    starts_vec.resize(n + 1);
    pair_vec.resize(n);
    starts = starts_vec.data();
    pair = pair_vec.data();
  }
  for (size_t i = 0; i <= n; ++i) starts[i] = static_cast<uint32_t>(i);
  size_t parts = n;
  auto rank_of = [&](size_t i) -> uint32_t {  // rank of parts i and i+1 merged
    if (i + 2 > parts) return kNoRank;
    return ranks.Find(piece.data() + starts[i], starts[i + 2] - starts[i]);
  };
  for (size_t i = 0; i + 1 < parts; ++i) pair[i] = rank_of(i);
  while (parts > 1) {
    uint32_t best = kNoRank;
    size_t at = 0;
    for (size_t i = 0; i + 1 < parts; ++i)
      if (pair[i] < best) {
        best = pair[i];
        at = i;
      }
    if (best == kNoRank) break;
    // Remove boundary at+1: parts `at` and `at+1` become one.
    for (size_t i = at + 1; i < parts; ++i) starts[i] = starts[i + 1];
    for (size_t i = at + 1; i + 1 < parts - 1; ++i) pair[i] = pair[i + 1];
    --parts;
    pair[at] = rank_of(at);
    if (at > 0) pair[at - 1] = rank_of(at - 1);
  }
  for (size_t i = 0; i < parts; ++i)
    out->push_back(ranks.Find(piece.data() + starts[i], starts[i + 1] - starts[i]));
}

void BpeMergeHeap(const RankTable& ranks, std::string_view piece, std::vector<uint32_t>* out) {
  const uint32_t n = static_cast<uint32_t>(piece.size());
  // Part i starts at byte i while alive; next[i] is the following live part (n = end).
  std::vector<uint32_t> next(n), prev(n), rank(n);
  std::vector<uint8_t> alive(n, 1);
  for (uint32_t i = 0; i < n; ++i) {
    next[i] = i + 1;
    prev[i] = i == 0 ? n : i - 1;  // n = none
  }
  auto pair_rank = [&](uint32_t i) -> uint32_t {
    const uint32_t j = next[i];
    if (j >= n) return kNoRank;
    const uint32_t end = next[j];
    return ranks.Find(piece.data() + i, end - i);
  };
  // Key = rank << 32 | start byte; the start byte is also the part's index, and ordering by
  // it breaks rank ties leftmost as the rescan does.
  std::vector<uint64_t> storage;
  storage.reserve(2 * n);
  std::priority_queue<uint64_t, std::vector<uint64_t>, std::greater<uint64_t>> heap(std::greater<uint64_t>(),
                                                                                      std::move(storage));
  auto push = [&](uint32_t i) {
    rank[i] = pair_rank(i);
    if (rank[i] != kNoRank) heap.push((uint64_t{rank[i]} << 32) | i);
  };
  for (uint32_t i = 0; i < n; ++i) push(i);
  while (!heap.empty()) {
    const uint64_t key = heap.top();
    const uint32_t i = static_cast<uint32_t>(key);
    heap.pop();
    // Stale entries: the part died or its pair changed since this entry was pushed.
    if (!alive[i] || rank[i] != static_cast<uint32_t>(key >> 32)) continue;
    const uint32_t j = next[i];
    alive[j] = 0;
    next[i] = next[j];
    if (next[j] < n) prev[next[j]] = i;
    push(i);
    if (prev[i] < n) push(prev[i]);
  }
  for (uint32_t i = 0; i < n; i = next[i]) out->push_back(ranks.Find(piece.data() + i, next[i] - i));
}

void BpeEncode(const RankTable& ranks, std::string_view piece, std::vector<uint32_t>* out) {
  const uint32_t whole = ranks.Find(piece);
  if (whole != kNoRank) {
    out->push_back(whole);
    return;
  }
  if (piece.size() <= kHeapThreshold)
    BpeMergeLinear(ranks, piece, out);
  else
    BpeMergeHeap(ranks, piece, out);
}

}  // namespace k3::tok
