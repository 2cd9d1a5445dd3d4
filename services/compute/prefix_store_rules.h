// The decisions of the persistent prefix store (prefix_store.h, docs/pipeline.md "Prefix
// store") as functions of plain values: how an entry is named (the model, the length and a hash
// of the ids it consumed), which entries may start a prompt and in what order, which entries
// are evicted to keep the directory under its cap, and where a prompt's snapshots are taken.
// No file is touched here.
#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/state_file.h"

namespace k3::compute::store {

// Everything that makes a state continue exactly: the model's identity and the expert inputs.
// Part of every entry's name, so models (and f32/bf16 runs) share a directory without meeting.
uint64_t ModelKey(const state::ModelIdentity& model, bool expert_inputs_bf16);

// XXH3-64 (seed 0) of the ids as little-endian int32 bytes.
uint64_t IdsHash(std::span<const int32_t> ids);

// What an entry's file name says: "k3p-<model key, 16 hex>-<length, decimal>-<ids hash, 16 hex>.k3state".
struct EntryKey {
  uint64_t model = 0;
  int64_t length = 0;  // ids the snapshot consumed (> 0)
  uint64_t ids = 0;    // IdsHash of them
  bool operator==(const EntryKey&) const = default;
};
std::string EntryName(const EntryKey& key);
EntryKey KeyOf(uint64_t model, std::span<const int32_t> ids);
// nullopt for any other name (temporary files, the lock, anything else in the directory).
std::optional<EntryKey> ParseEntryName(const std::string& name);

// The entries that may start a sequence fed `ids`, longest first: this model's, shorter than
// ids (at least one id is left to feed: the first token needs the last prompt id's logits)
// and no longer than `max_length`, whose ids hash is that of ids[0..length). The caller still
// checks the file (its checksum, model, and that its ids are exactly ids[0..length)).
std::vector<EntryKey> Candidates(const std::vector<EntryKey>& entries, uint64_t model,
                                 std::span<const int32_t> ids, int64_t max_length);

// An entry as the directory shows it: its size and when it was last written or used.
struct EntryUse {
  std::string name;
  int64_t bytes = 0;
  int64_t last_use_ns = 0;
};
// The entries to delete so that the rest plus `incoming` bytes fit `cap`: least recently used
// first (ties: by name, so two processes choose alike). Empty when they fit already, and when
// `incoming` alone exceeds the cap (nothing is evicted for it; the caller does not write it).
std::vector<std::string> ChooseEvictions(std::vector<EntryUse> entries, int64_t incoming, int64_t cap);

// The name an entry is written under before it is renamed into place (PrefixStore::Put), and
// whether a file of the directory is such a leftover, older than an hour: a process killed
// while writing left it (no write takes that long), so eviction may delete it.
std::string TemporaryName(int64_t pid, const EntryKey& key);
bool StaleTemporary(const std::string& name, int64_t age_ns);

// Where a prompt pass of `feed` ids offers snapshots, as offsets into the feed, ascending, each in (0, feed): every `interval` ids from
// the start of the feed (rounded up to whole prefill chunks, so these never add a pass;
// interval 0: none), `also` when it is inside (the end of a chat's preamble, say; 0: none),
// and feed - 1 (the prompt minus its last id) when `prompt_end`.
std::vector<int64_t> SnapshotMarks(int64_t feed, int64_t chunk, int64_t interval, int64_t also, bool prompt_end);

}  // namespace k3::compute::store
