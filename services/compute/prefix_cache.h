// Prefix reuse (docs/pipeline.md "Prefix cache"): a bounded cache of sequence snapshots, the
// ids a sequence consumed and a copy of its SequenceState after them. A new sequence whose
// prompt starts with a snapshot's ids starts from that state and feeds only the rest: the
// same bits as prefilling from scratch, because a forward pass continued from a state is
// bit-identical to one pass over the whole text (the property state files rely on).
//
// Bounded in bytes (exactly what the snapshots hold: ids + KDA state and conv windows + MLA
// rows, PrefixSnapshotBytes in common/plan), least recently used evicted first. Independent
// of who schedules sequences: it only stores and finds states.
#pragma once
#include <cstdint>
#include <list>
#include <span>
#include <vector>

#include "state.h"

namespace k3::compute {

struct PrefixSnapshot {
  std::vector<int32_t> ids;  // what the state consumed: state.position == ids.size()
  SequenceState state;
  int64_t bytes = 0;         // PrefixCache::BytesOf(ids, state)
  uint64_t partition = 0;    // Generate.cache_partition of the sequence it was taken from
};

class PrefixCache {
 public:
  explicit PrefixCache(int64_t capacity_bytes) : capacity_(capacity_bytes < 0 ? 0 : capacity_bytes) {}

  // The longest snapshot of `partition` whose ids are a prefix of `ids` and leave at least one
  // id to feed (the first generated token needs the logits of the last prompt id, which no
  // snapshot keeps). Snapshots of other partitions are never found: a client cannot learn what
  // another partition's prompts were (docs/server.md "Prefix cache and privacy"). Marks it most
  // recently used. Null when none matches; valid until the next Insert.
  const PrefixSnapshot* Lookup(std::span<const int32_t> ids, uint64_t partition);

  // Offers a copy of `state`, which consumed `ids`. Kept when it fits the bound, evicting the
  // least recently used snapshots; a snapshot bigger than the whole bound is not kept (nothing
  // is evicted for it). Ids already held: that snapshot becomes the most recently used.
  // Returns whether the cache now holds these ids (for this partition).
  bool Insert(std::span<const int32_t> ids, uint64_t partition, const SequenceState& state);

  // Whether a snapshot of `bytes` could be kept at all (the caller may skip making it).
  bool Fits(int64_t bytes) const { return bytes > 0 && bytes <= capacity_; }

  // Bytes a snapshot of `ids` and `state` holds: 4 per id, 4 per float of the KDA state and
  // conv windows, 4 per float of the MLA rows of the consumed positions.
  static int64_t BytesOf(size_t ids, const SequenceState& state);

  int64_t capacity() const { return capacity_; }
  int64_t bytes() const { return bytes_; }
  size_t size() const { return entries_.size(); }
  // How many ids each held snapshot consumed, most recently used first (tests, stderr).
  std::vector<size_t> Lengths() const;

 private:
  int64_t capacity_;
  int64_t bytes_ = 0;
  std::list<PrefixSnapshot> entries_;  // most recently used first
};

}  // namespace k3::compute
