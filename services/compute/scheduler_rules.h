// The decisions of compute's scheduler (scheduler.h) as functions of plain values: whether a
// Generate is refused and why, which requests share a pass, who joins the batch, and which
// requests use the prefix cache (docs/pipeline.md "Batched steps", "Prefix cache").
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/ipc/messages.h"
#include "generate.h"

namespace k3::compute {

// The sequence a Generate with keep_state continues: its ids (prompts and generated, a loaded
// state's included), how many of them its state consumed, and whether a stopped pass left
// that state half-updated.
struct KeptSequence {
  size_t ids = 0, consumed = 0;
  bool torn = false;
};

// The ids of the kept sequence a request keeps rather than feeds again: with keep_state those
// consumed (none with full_recompute, which feeds everything every step); none otherwise.
size_t KeptIds(const ipc::compute::Generate& g, const KeptSequence& kept);

// Why `g` is refused, in one line (empty: accepted). Checked in this order: ids in the
// vocabulary, sampling, spec, keep_state after a torn pass, no ids to feed, max_positions.
std::string RequestProblem(const ipc::compute::Generate& g, int64_t vocab, const KeptSequence& kept);

// Whether `g` runs in the batch (a new sequence, decoded incrementally; --spec is ignored above
// max_batch 1, the same ids); the others (keep_state, full_recompute, --spec at max_batch 1)
// run alone after the batch drains.
bool Batchable(const ipc::compute::Generate& g, int max_batch);

// Whether the first waiting message joins a batch of `running` sequences: a batchable
// Generate while there is room and no stop. The first that cannot join waits, and so does
// everything after it (arrival order).
bool JoinsBatch(const ipc::compute::Message& next, size_t running, int max_batch, bool interrupted);

// The members of the next pass, as indexes into the batch (admission order) given which are
// still prefilling: every decoding sequence, and the oldest prefilling one only.
std::vector<size_t> PassMembers(const std::vector<bool>& prefilling);

// Prefix cache (capacity in bytes, 0 = off). A new sequence starts from a snapshot unless it
// scores its prompt (perplexity) or recomputes everything (full_recompute); keep_state
// continues the kept sequence.
bool StartsFromCache(const ipc::compute::Generate& g, int64_t capacity);
// The same for the prefix store (prefix_store.h), when it is on, for the shared partition only:
// the store is one directory for every run and server, keyed by ids alone.
bool StartsFromStore(const ipc::compute::Generate& g, bool store_on);
// The store is offered snapshots of every prompt pass but a full_recompute one, keep_state
// included (a chat turn's prompt, keyed by the whole sequence); none of a Generate with a
// cache_partition (a server request's cache_salt).
bool OffersStore(const ipc::compute::Generate& g, bool store_on);
// A request offers the snapshot of its prompt minus the last id when it feeds at least two ids.
bool OffersPrompt(const ipc::compute::Generate& g, int64_t capacity, size_t feed);
// And the sequence at its end, unless a stop tore it or ended the process.
bool OffersEnd(const ipc::compute::Generate& g, int64_t capacity, bool torn, bool interrupted);
// The store is offered the sequence at its end too (a chat turn's end, keep_state included, or a
// served reply's), on the same terms as its prompt, unless a stop tore it or ended the process.
bool StoresEnd(const ipc::compute::Generate& g, bool store_on, bool torn, bool interrupted);

ipc::compute::StopReason WireReason(Ending e);

}  // namespace k3::compute
