// The persistent prefix store (services/compute/prefix_store{,_rules}.h): entry names, which
// entries may start a prompt and in what order, least-recently-used eviction under a cap,
// where a prompt's snapshots are taken; and the store over a real directory: restore of the
// longest stored prefix, the cap, a corrupt, a mislabelled and a foreign entry skipped with one
// warning, a directory that cannot be used. No checkpoint: states of a made-up model.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "prefix_store.h"
#include "prefix_store_rules.h"
#include "small_config.h"

namespace k3::compute {
namespace {

namespace fs = std::filesystem;
using store::EntryKey;

using fixtures::SmallConfig;

// A state that consumed n positions, every float telling it apart (`tag`).
SequenceState StateAfter(const ModelConfig& cfg, int64_t n, float tag) {
  SequenceState s;
  s.Reset(cfg);
  for (size_t l : {0u, 2u})
    for (size_t i = 0; i < s.kda[l].S.size(); ++i) s.kda[l].S[i] = tag + static_cast<float>(i);
  s.kda[0].conv_q[1] = -tag;
  MlaCache& m = s.mla[1];
  for (int64_t i = 0; i < n * cfg.kv_lora_rank; ++i) m.c.push_back(tag * 0.5f + static_cast<float>(i));
  for (int64_t i = 0; i < n * cfg.qk_rope_head_dim; ++i) m.kpe.push_back(tag * 0.25f - static_cast<float>(i));
  m.len = n;
  s.position = n;
  return s;
}

bool SameState(const SequenceState& a, const SequenceState& b) {
  if (a.position != b.position || a.kda.size() != b.kda.size()) return false;
  for (size_t l = 0; l < a.kda.size(); ++l) {
    const KdaState &x = a.kda[l], &y = b.kda[l];
    if (x.S != y.S || x.conv_q != y.conv_q || x.conv_k != y.conv_k || x.conv_v != y.conv_v) return false;
    if (a.mla[l].c != b.mla[l].c || a.mla[l].kpe != b.mla[l].kpe || a.mla[l].len != b.mla[l].len) return false;
  }
  return true;
}

TEST(PrefixStoreRules, EntryNamesRoundTripAndNothingElseParses) {
  const EntryKey k{0x0123456789abcdefull, 137, 0xfedcba9876543210ull};
  const std::string name = store::EntryName(k);
  EXPECT_EQ(name, "k3p-0123456789abcdef-137-fedcba9876543210.k3state");
  ASSERT_TRUE(store::ParseEntryName(name));
  EXPECT_EQ(*store::ParseEntryName(name), k);
  for (const char* other : {".lock", ".k3p-tmp-12-k3p-0123456789abcdef-137-fedcba9876543210.k3state",
                            "k3p-0123456789abcdef-137-fedcba9876543210.k3state.tmp-99",
                            "k3p-0123456789abcdef-0137-fedcba9876543210.k3state",   // another spelling of 137
                            "k3p-0123456789ABCDEF-137-fedcba9876543210.k3state",    // upper case
                            "k3p-0123456789abcdef-0-fedcba9876543210.k3state",      // no ids
                            "k3p-0123456789abcdef--5-fedcba9876543210.k3state", "k3p-123-5-456.k3state", "notes.txt"})
    EXPECT_FALSE(store::ParseEntryName(other)) << other;
}

TEST(PrefixStoreRules, KeysTellModelsExpertInputsAndIdsApart) {
  const state::ModelIdentity a{1, 2}, b{1, 3};
  EXPECT_NE(store::ModelKey(a, false), store::ModelKey(b, false));
  EXPECT_NE(store::ModelKey(a, false), store::ModelKey(a, true));
  EXPECT_EQ(store::ModelKey(a, true), store::ModelKey(state::ModelIdentity{1, 2}, true));
  const std::vector<int32_t> ids = {5, 6, 7};
  EXPECT_EQ(store::IdsHash(ids), XXH3_64bits(ids.data(), 12));  // the documented hash of the ids' bytes
  EXPECT_NE(store::IdsHash(std::vector<int32_t>{5, 6}), store::IdsHash(ids));
}

TEST(PrefixStoreRules, CandidatesArePrefixesOfThisModelLongestFirstLeavingAnIdToFeed) {
  const std::vector<int32_t> ids = {10, 20, 30, 40, 50, 60, 70, 80};
  const uint64_t me = 7, other = 8;
  auto prefix = [&](size_t n) { return std::span<const int32_t>(ids.data(), n); };
  const std::vector<int32_t> elsewhere = {10, 20, 31};
  const std::vector<EntryKey> entries = {
      store::KeyOf(me, prefix(3)),        store::KeyOf(me, prefix(6)),    store::KeyOf(me, prefix(1)),
      store::KeyOf(me, prefix(8)),        // the whole prompt: nothing left to feed
      store::KeyOf(other, prefix(5)),     // another model
      store::KeyOf(me, elsewhere),        // the same length as a prefix, other ids
      EntryKey{me, 5, store::IdsHash(prefix(4))},  // a name whose hash belongs to another length
      store::KeyOf(me, prefix(7)),
  };
  std::vector<int64_t> lengths;
  for (const EntryKey& k : store::Candidates(entries, me, ids, 100)) lengths.push_back(k.length);
  EXPECT_EQ(lengths, (std::vector<int64_t>{7, 6, 3, 1}));
  lengths.clear();
  for (const EntryKey& k : store::Candidates(entries, me, ids, 5)) lengths.push_back(k.length);
  EXPECT_EQ(lengths, (std::vector<int64_t>{3, 1}));
  EXPECT_TRUE(store::Candidates(entries, me, prefix(1), 100).empty());
}

TEST(PrefixStoreRules, EvictionTakesTheLeastRecentlyUsedUntilTheNewEntryFits) {
  const std::vector<store::EntryUse> e = {{"a", 40, 300}, {"b", 30, 100}, {"c", 20, 200}, {"d", 10, 100}};
  // 100 held; cap 120 and 50 incoming: 30 too many. b and d share the oldest time: b first by name.
  EXPECT_EQ(store::ChooseEvictions(e, 50, 120), (std::vector<std::string>{"b"}));
  EXPECT_EQ(store::ChooseEvictions(e, 55, 120), (std::vector<std::string>{"b", "d"}));
  EXPECT_EQ(store::ChooseEvictions(e, 20, 120), std::vector<std::string>{});   // fits
  EXPECT_EQ(store::ChooseEvictions(e, 100, 100), (std::vector<std::string>{"b", "d", "c", "a"}));
  EXPECT_EQ(store::ChooseEvictions(e, 101, 100), std::vector<std::string>{});  // never fits: nothing evicted
}

TEST(PrefixStoreRules, OnlyTemporariesOlderThanAnHourAreStale) {
  const std::string tmp = store::TemporaryName(4242, EntryKey{1, 5, 2});
  EXPECT_EQ(tmp, ".k3p-tmp-4242-k3p-0000000000000001-5-0000000000000002.k3state");
  EXPECT_FALSE(store::ParseEntryName(tmp));
  const int64_t hour = int64_t{3600} * 1000000000;
  EXPECT_TRUE(store::StaleTemporary(tmp, hour + 1));
  EXPECT_FALSE(store::StaleTemporary(tmp, hour - 1));  // maybe still being written
  EXPECT_FALSE(store::StaleTemporary("k3p-0000000000000001-5-0000000000000002.k3state", 10 * hour));  // an entry
  EXPECT_FALSE(store::StaleTemporary(".lock", 10 * hour));
}

TEST(PrefixStoreRules, SnapshotMarksAtChunkAlignedIntervalsTheAlsoPointAndThePromptEnd) {
  // interval 10 rounds up to 3 chunks of 4 = 12.
  EXPECT_EQ(store::SnapshotMarks(40, 4, 10, 0, true), (std::vector<int64_t>{12, 24, 36, 39}));
  EXPECT_EQ(store::SnapshotMarks(40, 4, 10, 17, false), (std::vector<int64_t>{12, 17, 24, 36}));
  EXPECT_EQ(store::SnapshotMarks(36, 4, 12, 12, true), (std::vector<int64_t>{12, 24, 35}));  // no mark at the end
  EXPECT_EQ(store::SnapshotMarks(10, 4, 0, 0, true), (std::vector<int64_t>{9}));
  EXPECT_EQ(store::SnapshotMarks(10, 4, 0, 10, false), std::vector<int64_t>{});  // `also` outside the feed
  EXPECT_EQ(store::SnapshotMarks(1, 4, 0, 0, true), std::vector<int64_t>{});     // one id: nothing before it
}

class PrefixStoreDir : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = (fs::temp_directory_path() / ("k3-prefix-store-" + std::to_string(::getpid()))).string();
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::vector<std::string> Entries() const {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(dir_))
      if (store::ParseEntryName(e.path().filename().string())) out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  }
  std::string dir_;
  ModelConfig cfg_ = SmallConfig();
  state::ModelIdentity model_{11, 22};
  std::vector<int32_t> ids_ = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  std::span<const int32_t> Prefix(size_t n) const { return {ids_.data(), n}; }
};

TEST_F(PrefixStoreDir, RestoresTheLongestStoredPrefixAcrossInstances) {
  {
    PrefixStore s(dir_, 1 << 20, cfg_, model_);
    ASSERT_TRUE(s.on());
    EXPECT_TRUE(s.Wants(Prefix(4)));
    s.Put(Prefix(4), StateAfter(cfg_, 4, 1));
    s.Put(Prefix(7), StateAfter(cfg_, 7, 2));
    EXPECT_FALSE(s.Wants(Prefix(7)));  // held already
    EXPECT_EQ(s.written(), 2);
  }
  PrefixStore s(dir_, 1 << 20, cfg_, model_);  // another process, later
  SequenceState got;
  EXPECT_EQ(s.Restore(ids_, 0, got), 7);
  EXPECT_TRUE(SameState(got, StateAfter(cfg_, 7, 2)));
  EXPECT_EQ(s.Restore(Prefix(7), 0, got), 4);  // 7 would leave nothing to feed
  EXPECT_TRUE(SameState(got, StateAfter(cfg_, 4, 1)));
  EXPECT_EQ(s.Restore(ids_, 7, got), 0);  // the cache in front holds 7 already
  EXPECT_EQ(got.position, 0);
  EXPECT_EQ(s.Restore(std::vector<int32_t>{1, 2, 3, 5, 5, 6}, 0, got), 0);
  // Another model's store is separate even in the same directory.
  PrefixStore other(dir_, 1 << 20, cfg_, state::ModelIdentity{11, 23});
  EXPECT_EQ(other.Restore(ids_, 0, got), 0);
}

TEST_F(PrefixStoreDir, EvictsTheLeastRecentlyUsedToStayUnderTheCap) {
  const int64_t one = static_cast<int64_t>(state::kHeaderBytes) + 4 * 3 + 4 * static_cast<int64_t>(state::BodyFloats(cfg_, 3)) + 8;
  PrefixStore s(dir_, 2 * one + 1, cfg_, model_);  // room for two entries of 3 ids
  const std::vector<int32_t> a = {1, 2, 3}, b = {4, 5, 6}, c = {7, 8, 9};
  s.Put(a, StateAfter(cfg_, 3, 1));
  s.Put(b, StateAfter(cfg_, 3, 2));
  // Use a (its time becomes the newest), then a third entry evicts b.
  const auto name = [&](const std::vector<int32_t>& v) { return store::EntryName(store::KeyOf(store::ModelKey(model_, false), v)); };
  ::usleep(20000);
  SequenceState got;
  const std::vector<int32_t> a_more = {1, 2, 3, 9};
  ASSERT_EQ(s.Restore(a_more, 0, got), 3);
  ::usleep(20000);
  s.Put(c, StateAfter(cfg_, 3, 3));
  std::vector<std::string> want = {name(a), name(c)};
  std::sort(want.begin(), want.end());
  EXPECT_EQ(Entries(), want);
  // A writer killed two hours ago left a temporary: the next write deletes it; a fresh one stays.
  const std::string old_tmp = dir_ + "/" + store::TemporaryName(1, store::KeyOf(7, b));
  const std::string new_tmp = dir_ + "/" + store::TemporaryName(2, store::KeyOf(7, b));
  std::ofstream(old_tmp) << "half";
  std::ofstream(new_tmp) << "half";
  const struct timespec two_hours_ago[2] = {{::time(nullptr) - 7200, 0}, {::time(nullptr) - 7200, 0}};
  ASSERT_EQ(::utimensat(AT_FDCWD, old_tmp.c_str(), two_hours_ago, 0), 0);
  s.Put(std::vector<int32_t>{5, 5, 5}, StateAfter(cfg_, 3, 4));
  EXPECT_FALSE(fs::exists(old_tmp));
  EXPECT_TRUE(fs::exists(new_tmp));
  fs::remove(new_tmp);
  want = {name(c), name({5, 5, 5})};  // a was used before c was written: now the oldest
  std::sort(want.begin(), want.end());
  EXPECT_EQ(Entries(), want);
  // An entry bigger than the cap is not written and evicts nothing.
  PrefixStore small(dir_, one - 1, cfg_, model_);
  EXPECT_FALSE(small.Wants(b));
  EXPECT_EQ(Entries(), want);
}

TEST_F(PrefixStoreDir, CorruptMislabelledAndForeignEntriesAreSkippedWithOneWarningEach) {
  PrefixStore s(dir_, 1 << 20, cfg_, model_);
  s.Put(Prefix(3), StateAfter(cfg_, 3, 1));
  s.Put(Prefix(5), StateAfter(cfg_, 5, 2));
  s.Put(Prefix(8), StateAfter(cfg_, 8, 3));
  const uint64_t key = store::ModelKey(model_, false);
  const std::string p8 = dir_ + "/" + store::EntryName(store::KeyOf(key, Prefix(8)));
  const std::string p5 = dir_ + "/" + store::EntryName(store::KeyOf(key, Prefix(5)));
  {  // one flipped byte in the longest entry's body
    std::fstream f(p8, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(200);
    char c = 0;
    f.read(&c, 1);
    f.seekp(200);
    c = static_cast<char>(c ^ 0x10);
    f.write(&c, 1);
  }
  // The 5-entry replaced by another model's snapshot of the same ids.
  const std::string foreign_dir = dir_ + "-foreign";
  {
    PrefixStore f(foreign_dir, 1 << 20, cfg_, state::ModelIdentity{99, 22});
    f.Put(Prefix(5), StateAfter(cfg_, 5, 2));
    const std::string src = foreign_dir + "/" + store::EntryName(store::KeyOf(store::ModelKey({99, 22}, false), Prefix(5)));
    fs::copy_file(src, p5, fs::copy_options::overwrite_existing);
  }
  fs::remove_all(foreign_dir);
  SequenceState got;
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(s.Restore(ids_, 0, got), 3);  // 8 and 5 fail their checks
  EXPECT_TRUE(SameState(got, StateAfter(cfg_, 3, 1)));
  EXPECT_EQ(s.Restore(ids_, 0, got), 3);  // again: no second warning
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("checksum mismatch"), std::string::npos) << err;
  EXPECT_NE(err.find("from another model"), std::string::npos) << err;
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 2) << err;
  EXPECT_EQ(err.rfind("k3-compute: warning: prefix store ", 0), 0u) << err;

  // A file under a name that is not its ids (renamed by hand): skipped, never used.
  fs::remove(p8);
  fs::remove(p5);
  const std::string p3 = dir_ + "/" + store::EntryName(store::KeyOf(key, Prefix(3)));
  fs::rename(p3, dir_ + "/" + store::EntryName(EntryKey{key, 3, store::IdsHash(std::vector<int32_t>{1, 2, 4})}));
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(s.Restore(std::vector<int32_t>{1, 2, 4, 7}, 0, got), 0);
  const std::string err2 = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err2.find("does not hold the ids its name says"), std::string::npos) << err2;
  EXPECT_EQ(got.position, 0);  // a fresh state, nothing of the file
  EXPECT_EQ(got.mla[1].len, 0);
  EXPECT_EQ(got.kda[0].S, std::vector<float>(got.kda[0].S.size(), 0.0f));
}

TEST_F(PrefixStoreDir, ADirectoryThatCannotBeMadeIsOneWarningAndOff) {
  fs::create_directories(dir_);
  std::ofstream(dir_ + "/file") << "x";
  ::testing::internal::CaptureStderr();
  PrefixStore s(dir_ + "/file/sub", 1 << 20, cfg_, model_);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_FALSE(s.on());
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
  SequenceState got;
  EXPECT_EQ(s.Restore(ids_, 0, got), 0);
  EXPECT_FALSE(s.Wants(Prefix(3)));
  // Junk in a usable directory is ignored: not read, not evicted.
  PrefixStore t(dir_, 1 << 20, cfg_, model_);
  EXPECT_TRUE(t.on());
  EXPECT_EQ(t.Restore(ids_, 0, got), 0);
  EXPECT_TRUE(fs::exists(dir_ + "/file"));
}

}  // namespace
}  // namespace k3::compute
