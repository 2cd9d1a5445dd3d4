// The persistent prefix store (docs/pipeline.md "Prefix store", docs/formats.md "Prefix store
// directory"): sequence snapshots on disk, one state file each (common/state_file.h: checksum,
// model and layout hash, atomic writes), named by the model, the ids they consumed and a hash
// of them (prefix_store_rules.h), so that every run of the model, and the server, can start a
// prompt from the longest stored prefix instead of prefilling it. The files are the whole
// truth: there is no index to go stale, and two processes may share a directory (entries appear
// by rename; a lock file taken with flock orders eviction and the renames).
//
// Never a reason to fail a run: a directory that cannot be used, an entry that fails its checks,
// a write that fails (a full disk), each is one warning line on stderr
// ("k3-compute: warning: prefix store DIR: ..."), and the run goes on without it.
#pragma once
#include <cstdint>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "common/model_config.h"
#include "common/state_file.h"
#include "state.h"

namespace k3::compute {

class PrefixStore {
 public:
  // `dir` empty: off. Creates `dir` if missing; one that cannot be made, opened or locked:
  // one warning, off. `cap_bytes`: the entries' total size the directory is kept under.
  PrefixStore(std::string dir, int64_t cap_bytes, const ModelConfig& cfg, const state::ModelIdentity& model);
  PrefixStore(const PrefixStore&) = delete;
  PrefixStore& operator=(const PrefixStore&) = delete;

  bool on() const { return on_; }

  // The longest stored prefix of `ids` longer than `longer_than` ids (and leaving at least one
  // id to feed) that passes every check, read straight into `state`; its length, or 0 (none:
  // `state` is then a fresh one). An entry that fails (corrupt, truncated, another model, ids
  // other than its name says) is skipped with one warning and the next shorter one is tried.
  // The entry used becomes the most recently used.
  int64_t Restore(std::span<const int32_t> ids, int64_t longer_than, SequenceState& state);

  // Whether a snapshot of `ids` is worth making (the store is on and writable, no entry holds
  // these ids yet, and one fits the cap); marks an existing one as used.
  bool Wants(std::span<const int32_t> ids);
  // Writes the snapshot of `state` (which consumed `ids`), evicting least recently used
  // entries to stay under the cap. A failed write: one warning, no more writes by this process.
  void Put(std::span<const int32_t> ids, const SequenceState& state);

  // Entries written and restored by this process (the stats line).
  int64_t written() const { return written_; }
  int64_t restored() const { return restored_; }

 private:
  void Warn(const std::string& what);
  std::string PathOf(const std::string& name) const { return dir_ + "/" + name; }
  int64_t EntryBytes(int64_t length) const;

  std::string dir_;
  int64_t cap_ = 0;
  const ModelConfig& cfg_;
  state::ModelIdentity model_;
  uint64_t key_ = 0;
  bool on_ = false, writable_ = false;
  int lock_fd_ = -1;
  std::set<std::string> warned_;  // entries already warned about (one line each)
  int64_t written_ = 0, restored_ = 0;

 public:
  ~PrefixStore();
};

}  // namespace k3::compute
