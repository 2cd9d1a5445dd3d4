#include "prefix_cache.h"

#include <algorithm>

namespace k3::compute {

int64_t PrefixCache::BytesOf(size_t ids, const SequenceState& state) {
  int64_t floats = 0;
  for (const KdaState& k : state.kda)
    floats += static_cast<int64_t>(k.S.size() + k.conv_q.size() + k.conv_k.size() + k.conv_v.size());
  for (const MlaCache& m : state.mla) floats += static_cast<int64_t>(m.c.size() + m.kpe.size());
  return 4 * (floats + static_cast<int64_t>(ids));
}

const PrefixSnapshot* PrefixCache::Lookup(std::span<const int32_t> ids, uint64_t partition) {
  auto best = entries_.end();
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    if (it->partition != partition) continue;
    const std::vector<int32_t>& have = it->ids;
    if (have.size() >= ids.size()) continue;  // leaves no id to feed
    if (best != entries_.end() && have.size() <= best->ids.size()) continue;
    if (std::equal(have.begin(), have.end(), ids.begin())) best = it;
  }
  if (best == entries_.end()) return nullptr;
  entries_.splice(entries_.begin(), entries_, best);  // most recently used
  return &entries_.front();
}

bool PrefixCache::Insert(std::span<const int32_t> ids, uint64_t partition, const SequenceState& state) {
  if (ids.empty() || static_cast<int64_t>(ids.size()) != state.position) return false;  // not a consistent snapshot
  for (auto it = entries_.begin(); it != entries_.end(); ++it)
    if (it->partition == partition && std::equal(it->ids.begin(), it->ids.end(), ids.begin(), ids.end())) {
      entries_.splice(entries_.begin(), entries_, it);  // the same state: keep one, now recent
      return true;
    }
  const int64_t need = BytesOf(ids.size(), state);
  if (!Fits(need)) return false;
  while (bytes_ + need > capacity_ && !entries_.empty()) {
    bytes_ -= entries_.back().bytes;
    entries_.pop_back();
  }
  entries_.push_front(PrefixSnapshot{std::vector<int32_t>(ids.begin(), ids.end()), state, need, partition});
  bytes_ += need;
  return true;
}

std::vector<size_t> PrefixCache::Lengths() const {
  std::vector<size_t> out;
  for (const PrefixSnapshot& e : entries_) out.push_back(e.ids.size());
  return out;
}

}  // namespace k3::compute
