#include "prefix_store.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "prefix_store_rules.h"
#include "saved_state.h"

namespace k3::compute {
namespace fs = std::filesystem;

namespace {

// Every entry of the directory (any model's), with its size and last use (mtime).
std::vector<store::EntryUse> ListEntries(const std::string& dir) {
  std::vector<store::EntryUse> out;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (!store::ParseEntryName(name)) continue;
    struct stat st {};
    if (::stat(it->path().c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;  // gone meanwhile
    out.push_back({name, static_cast<int64_t>(st.st_size),
                   static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec});
  }
  return out;
}

// Deletes what killed writers left (store::StaleTemporary): they are not entries, so the cap
// would never count them.
void RemoveStaleTemporaries(const std::string& dir) {
  const int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                          std::chrono::system_clock::now().time_since_epoch()).count();
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    struct stat st {};
    if (::stat(it->path().c_str(), &st) != 0) continue;
    const int64_t mtime = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
    if (store::StaleTemporary(it->path().filename().string(), now - mtime)) std::remove(it->path().c_str());
  }
}

// Marks an entry as just used (its mtime is the store's LRU clock; atime is often not kept).
void Touch(const std::string& path) { ::utimensat(AT_FDCWD, path.c_str(), nullptr, 0); }

}  // namespace

PrefixStore::PrefixStore(std::string dir, int64_t cap_bytes, const ModelConfig& cfg, const state::ModelIdentity& model)
    : dir_(std::move(dir)), cap_(cap_bytes), cfg_(cfg), model_(model),
      key_(store::ModelKey(model, cfg.expert_inputs_bf16)) {
  if (dir_.empty()) return;
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec || !fs::is_directory(dir_, ec)) {
    Warn("not a directory that can be made or used (" + (ec ? ec.message() : std::string("a file is in the way")) +
         "); running without it");
    return;
  }
  // The lock file orders eviction and renames between processes sharing the directory; reading
  // needs no lock, so a directory this process cannot write to is still read.
  lock_fd_ = ::open(PathOf(".lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  const std::string why = lock_fd_ < 0 ? std::string(" (its lock file: ") + std::strerror(errno) + ")" : "";
  on_ = true;
  writable_ = lock_fd_ >= 0 && ::access(dir_.c_str(), W_OK) == 0;
  if (!writable_) Warn("not writable" + why + "; stored prefixes are read, none are written");
}

PrefixStore::~PrefixStore() {
  if (lock_fd_ >= 0) ::close(lock_fd_);
}

void PrefixStore::Warn(const std::string& what) {
  std::fprintf(stderr, "k3-compute: warning: prefix store %s: %s\n", dir_.c_str(), what.c_str());
}

int64_t PrefixStore::EntryBytes(int64_t length) const {
  return state::kHeaderBytes + 4 * length + 4 * static_cast<int64_t>(state::BodyFloats(cfg_, length)) + 8;
}

int64_t PrefixStore::Restore(std::span<const int32_t> ids, int64_t longer_than, SequenceState& s) {
  if (!on_ || ids.size() < 2) {
    s.Reset(cfg_);
    return 0;
  }
  std::vector<store::EntryKey> keys;
  for (const store::EntryUse& e : ListEntries(dir_)) keys.push_back(*store::ParseEntryName(e.name));
  for (const store::EntryKey& k : store::Candidates(keys, key_, ids, static_cast<int64_t>(ids.size()) - 1)) {
    if (k.length <= longer_than) break;  // longest first
    const std::string name = store::EntryName(k), path = PathOf(name);
    try {
      const state::StateInfo info = LoadSequenceInto(path, cfg_, model_, 0, s);
      const auto want = ids.subspan(0, static_cast<size_t>(k.length));
      if (info.position != k.length || !std::equal(info.ids.begin(), info.ids.end(), want.begin(), want.end()))
        throw std::runtime_error("state file " + path + ": does not hold the ids its name says");
      Touch(path);
      ++restored_;
      return k.length;
    } catch (const std::exception& e) {
      // An entry another process evicted between the listing and the read is no fault.
      if (!fs::exists(path)) continue;
      if (warned_.insert(name).second) Warn(std::string("entry skipped: ") + e.what());
    }
  }
  s.Reset(cfg_);  // fresh (what a failed read left is not a state)
  return 0;
}

bool PrefixStore::Wants(std::span<const int32_t> ids) {
  if (!on_ || !writable_ || ids.empty() || EntryBytes(static_cast<int64_t>(ids.size())) > cap_) return false;
  const std::string path = PathOf(store::EntryName(store::KeyOf(key_, ids)));
  if (::access(path.c_str(), F_OK) == 0) {
    Touch(path);  // held already: the same bits (a snapshot of these ids is unique)
    return false;
  }
  return true;
}

void PrefixStore::Put(std::span<const int32_t> ids, const SequenceState& state) {
  if (!Wants(ids)) return;
  const store::EntryKey key = store::KeyOf(key_, ids);
  const std::string name = store::EntryName(key);
  const std::string tmp = PathOf(store::TemporaryName(::getpid(), key));
  try {
    SaveSequence(tmp, cfg_, model_, state, std::vector<int32_t>(ids.begin(), ids.end()), "");
  } catch (const std::exception& e) {
    std::remove(tmp.c_str());
    writable_ = false;
    Warn(std::string("cannot write a snapshot (") + e.what() + "); no more snapshots from this process");
    return;
  }
  // Under the lock: evict to make room, then rename into place, so two writers never both
  // count the same free space.
  const int64_t bytes = EntryBytes(static_cast<int64_t>(ids.size()));
  ::flock(lock_fd_, LOCK_EX);
  RemoveStaleTemporaries(dir_);
  for (const std::string& victim : store::ChooseEvictions(ListEntries(dir_), bytes, cap_))
    std::remove(PathOf(victim).c_str());
  const bool ok = std::rename(tmp.c_str(), PathOf(name).c_str()) == 0;
  const int err = errno;
  ::flock(lock_fd_, LOCK_UN);
  if (!ok) {
    std::remove(tmp.c_str());
    writable_ = false;
    Warn(std::string("cannot rename a snapshot into place (") + std::strerror(err) + "); no more snapshots");
    return;
  }
  ++written_;
}

}  // namespace k3::compute
