// k3-expert-fetcher as a real process: bytes equal the file (every backend), LRU eviction and
// holds, NoSlot, prefetch, rejected messages, kill -9 + restart, cache trace files.
#include <thread>
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "common/io/block_reader.h"
#include "common/model_config.h"
#include "common/safetensors.h"
#include "common/tensor_names.h"
#include "service_harness.h"

namespace k3::test {
namespace {

namespace x = ipc::experts;

class ExpertFetcherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    uint64_t widest = 0;
    for (int l = static_cast<int>(cfg_.first_k_dense_replace); l < cfg_.num_layers; ++l)
      for (int e = 0; e < cfg_.num_experts; ++e) {
        const ByteRange r = ExpertRange(ck_, l, e);
        widest = std::max<uint64_t>(widest, r.end - r.begin);
      }
    slot_bytes_ = (widest + 2 * 4096) / 4096 * 4096;
  }
  void TearDown() override {
    fetcher_.Kill9();
    arena_.Unlink();
  }
  void MakeArena(uint32_t slots) {
    arena_ = ipc::ShmArena::Create(launcher_.ArenaName("experts"), ipc::SlotTable::BytesNeeded(slots, slot_bytes_));
    ipc::SlotTable::Format(arena_, slots, slot_bytes_);
  }
  void Start(const std::string& io, const std::string& dump = "", bool warm = false) {
    std::vector<std::string> argv = {K3_EXPERT_FETCHER, "--model", model_, "--control", launcher_.Endpoint("control"),
                                     "--bind", launcher_.Endpoint("experts"), "--arena", arena_.name(), "--io", io,
                                     "--inflight", "4"};
    if (!dump.empty()) argv.insert(argv.end(), {"--dump-cache-trace", dump});
    if (warm) argv.push_back("--warm");
    fetcher_ = Child(argv, launcher_.StderrPath("expert-fetcher"));
    ASSERT_TRUE(launcher_.WaitReady("expert-fetcher")) << launcher_.ReadStderr("expert-fetcher");
  }
  // The expert's bytes start at begin % 4096 in its slot (the read is widened down).
  void CheckBytes(const x::ExpertReady& r) {
    const ByteRange br = ExpertRange(ck_, r.layer, r.expert);
    const auto want = FileBytes(ck_.shard_paths()[br.shard], br.begin, br.end - br.begin);
    auto table = ipc::SlotTable::Attach(arena_);
    auto bytes = table.Read({static_cast<uint32_t>(r.slot), r.generation});
    ASSERT_FALSE(bytes.empty()) << "stale ExpertReady for " << r.layer << "/" << r.expert;
    const size_t lead = static_cast<size_t>(br.begin % 4096);
    ASSERT_LE(lead + want.size(), bytes.size());
    EXPECT_TRUE(std::equal(want.begin(), want.end(), bytes.data() + lead))
        << "expert " << r.layer << "/" << r.expert << " bytes differ from the file";
  }
  // Collects `n` answers (Ready or Failed) for one request.
  std::vector<x::Message> Answers(Peer& p, size_t n) {
    std::vector<x::Message> out;
    while (out.size() < n) {
      auto m = p.Recv(ipc::DecodeExperts);
      if (!m) {
        ADD_FAILURE() << "only " << out.size() << " of " << n << " answers\n" << launcher_.ReadStderr("expert-fetcher");
        break;
      }
      out.push_back(*m);
    }
    return out;
  }
  x::ExpertReady Demand(Peer& p, uint64_t id, int layer, int expert) {
    p.Send(x::ExpertRequest{id, layer, {expert}, x::Priority::kDemand});
    auto a = Answers(p, 1);
    if (a.empty() || !std::holds_alternative<x::ExpertReady>(a[0])) {
      ADD_FAILURE() << "no ExpertReady for " << layer << "/" << expert;
      return {};
    }
    return std::get<x::ExpertReady>(a[0]);
  }

  FakeLauncher launcher_;
  std::string model_ = TinyCheckpoint();
  Checkpoint ck_ = Checkpoint::Open(model_);
  ModelConfig cfg_ = LoadModelConfig(model_ + "/config.json");
  int first_ = static_cast<int>(cfg_.first_k_dense_replace);
  uint64_t slot_bytes_ = 0;
  ipc::ShmArena arena_;
  Child fetcher_;
};

TEST_F(ExpertFetcherTest, DeliversFileBytesWithEveryBackend) {
  MakeArena(4);
  for (const std::string io : {"direct", "pread", "uring", "mmap"}) {
    SCOPED_TRACE(io);
    if (io == "direct" && !io::DirectIoSupported(ck_.shard_paths()[0])) continue;
    Start(io);
    Peer compute(launcher_.ctx(), launcher_.Endpoint("experts"));
    uint64_t id = 0;
    for (int l = first_; l < cfg_.num_layers; ++l)
      for (int e0 = 0; e0 < cfg_.num_experts; e0 += 3) {
        std::vector<int32_t> es;
        for (int e = e0; e < std::min<int>(e0 + 3, cfg_.num_experts); ++e) es.push_back(e);
        compute.Send(x::ExpertRequest{++id, l, es, x::Priority::kDemand});
        std::set<int> got;
        for (const auto& m : Answers(compute, es.size())) {
          ASSERT_TRUE(std::holds_alternative<x::ExpertReady>(m));
          const auto& r = std::get<x::ExpertReady>(m);
          EXPECT_EQ(r.request_id, id);
          EXPECT_EQ(r.layer, l);
          got.insert(r.expert);
          CheckBytes(r);
          compute.Send(x::ExpertRelease{r.layer, r.expert, r.slot, r.generation});
        }
        EXPECT_EQ(got.size(), es.size());
      }
    auto stats = launcher_.ShutdownAndStats("expert-fetcher");
    EXPECT_EQ(stats["rejected_messages"], 0);
    EXPECT_EQ(stats["requests"], static_cast<double>((cfg_.num_layers - first_) * cfg_.num_experts));
    EXPECT_EQ(fetcher_.Wait(), 0);
  }
  EXPECT_NE(launcher_.ReadStderr("expert-fetcher").find("hit rate"), std::string::npos);
}

TEST_F(ExpertFetcherTest, LruEvictionRespectsHolds) {
  MakeArena(3);
  Start("pread");
  Peer compute(launcher_.ctx(), launcher_.Endpoint("experts"));
  const int L = first_;
  auto a = Demand(compute, 1, L, 0);
  auto b = Demand(compute, 2, L, 1);
  auto c = Demand(compute, 3, L, 2);
  std::set<int> slots = {a.slot, b.slot, c.slot};
  EXPECT_EQ(slots.size(), 3u) << "three misses fill three slots";
  // Everything held: a fourth expert has nowhere to go.
  compute.Send(x::ExpertRequest{4, L, {3}, x::Priority::kDemand});
  auto f = Answers(compute, 1);
  ASSERT_EQ(f.size(), 1u);
  ASSERT_TRUE(std::holds_alternative<x::ExpertFailed>(f[0]));
  EXPECT_EQ(std::get<x::ExpertFailed>(f[0]).error, x::Error::kNoSlot);
  // Release 0 and 1 (2 stays held); touch 0 with a hit, so 1 is least recently used.
  compute.Send(x::ExpertRelease{L, 0, a.slot, a.generation});
  compute.Send(x::ExpertRelease{L, 1, b.slot, b.generation});
  auto a2 = Demand(compute, 5, L, 0);
  EXPECT_EQ(a2.slot, a.slot) << "hit";
  EXPECT_EQ(a2.generation, a.generation) << "a hit is not re-read";
  compute.Send(x::ExpertRelease{L, 0, a2.slot, a2.generation});
  auto d = Demand(compute, 6, L, 3);
  EXPECT_EQ(d.slot, b.slot) << "expert 1 was the least recently used unheld slot";
  CheckBytes(d);
  auto table = ipc::SlotTable::Attach(arena_);
  EXPECT_FALSE(table.IsCurrent({static_cast<uint32_t>(b.slot), b.generation}));
  EXPECT_TRUE(table.IsCurrent({static_cast<uint32_t>(c.slot), c.generation})) << "held slot untouched";
  // Expert 1 again: a miss; the only unheld slot is expert 0's.
  compute.Send(x::ExpertRelease{L, 3, d.slot, d.generation});
  auto b2 = Demand(compute, 7, L, 1);
  EXPECT_EQ(b2.slot, a.slot);
  CheckBytes(b2);
  CheckBytes(c);
  auto stats = launcher_.ShutdownAndStats("expert-fetcher");
  EXPECT_EQ(stats["hits"], 1);
  EXPECT_EQ(stats["misses"], 6);
  EXPECT_EQ(stats["rejected_messages"], 0);
}

TEST_F(ExpertFetcherTest, PrefetchWarmsTheCacheWithoutAnswers) {
  MakeArena(static_cast<uint32_t>(2 * cfg_.top_k));
  Start("pread");
  Peer compute(launcher_.ctx(), launcher_.Endpoint("experts"));
  const int L = first_;
  compute.Send(x::ExpertRequest{1, L, {4, 5}, x::Priority::kPrefetch});
  EXPECT_FALSE(compute.Recv(ipc::DecodeExperts, 500ms).has_value()) << "prefetch is not answered";
  auto r = Demand(compute, 2, L, 5);
  CheckBytes(r);
  auto stats = launcher_.ShutdownAndStats("expert-fetcher");
  EXPECT_EQ(stats["hits"], 1) << "the prefetched expert is a hit";
  EXPECT_EQ(stats["misses"], 0);
  EXPECT_EQ(stats["hints_received"], 1);
  EXPECT_EQ(stats["prefetch_reads"], 2);
  EXPECT_EQ(stats["prefetch_used"], 1) << "expert 4 was read ahead but never asked for";
}

// With fewer than two layers' worth of slots a guess would take the slot the next demand
// needs: the fetcher counts it and reads nothing.
TEST_F(ExpertFetcherTest, PrefetchIgnoredWithFewerThanTwoLayersOfSlots) {
  MakeArena(static_cast<uint32_t>(2 * cfg_.top_k - 1));
  Start("pread");
  Peer compute(launcher_.ctx(), launcher_.Endpoint("experts"));
  const int L = first_;
  compute.Send(x::ExpertRequest{1, L, {4, 5}, x::Priority::kPrefetch});
  EXPECT_FALSE(compute.Recv(ipc::DecodeExperts, 500ms).has_value()) << "prefetch is not answered";
  CheckBytes(Demand(compute, 2, L, 5));
  auto stats = launcher_.ShutdownAndStats("expert-fetcher");
  EXPECT_EQ(stats["hints_received"], 1);
  EXPECT_EQ(stats["prefetch_reads"], 0);
  EXPECT_EQ(stats["hits"], 0);
  EXPECT_EQ(stats["misses"], 1);
}

// --warm with a slot for every routed expert: all are read ahead, so every later demand is a
// hit with the file's bytes. With fewer slots than experts --warm does nothing.
TEST_F(ExpertFetcherTest, WarmReadsEveryExpertAheadWhenAllFit) {
  const uint32_t all = static_cast<uint32_t>((cfg_.num_layers - first_) * cfg_.num_experts);
  MakeArena(all);
  Start("pread", "", /*warm=*/true);
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // the warm-up is idle-time work
  Peer compute(launcher_.ctx(), launcher_.Endpoint("experts"));
  uint64_t id = 1;
  for (int l = first_; l < cfg_.num_layers; ++l)
    for (int e = 0; e < cfg_.num_experts; ++e) CheckBytes(Demand(compute, id++, l, e));
  auto stats = launcher_.ShutdownAndStats("expert-fetcher");
  EXPECT_EQ(stats["hits"], all) << "every expert was read ahead";
  EXPECT_EQ(stats["misses"], 0);
}

TEST_F(ExpertFetcherTest, WarmIsANoOpWhenNotEveryExpertFits) {
  MakeArena(3);
  Start("pread", "", /*warm=*/true);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  Peer compute(launcher_.ctx(), launcher_.Endpoint("experts"));
  CheckBytes(Demand(compute, 1, first_, 0));
  auto stats = launcher_.ShutdownAndStats("expert-fetcher");
  EXPECT_EQ(stats["misses"], 1) << "nothing was read ahead";
}

TEST_F(ExpertFetcherTest, RejectsMalformedAndStaleMessagesAndKeepsAnswering) {
  MakeArena(3);
  Start("pread");
  Peer compute(launcher_.ctx(), launcher_.Endpoint("experts"));
  auto r = Demand(compute, 1, first_, 0);
  compute.SendRaw({"garbage"});
  compute.SendRaw({std::string("\x03\x01", 2), std::string(64, '\xff')});
  compute.Send(ipc::weights::LayerWant{0});                                // wrong protocol
  compute.Send(x::ExpertRelease{first_, 0, r.slot, r.generation + 2});     // stale generation
  compute.Send(x::ExpertRelease{first_, 0, 99, r.generation});             // no such slot
  compute.Send(x::ExpertRelease{first_, 0, r.slot, r.generation});         // good
  compute.Send(x::ExpertRelease{first_, 0, r.slot, r.generation});         // released twice
  compute.Send(x::ExpertRequest{2, 0, {0}, x::Priority::kDemand});         // dense layer: no experts
  auto a = Answers(compute, 1);
  ASSERT_EQ(a.size(), 1u);
  ASSERT_TRUE(std::holds_alternative<x::ExpertFailed>(a[0]));
  EXPECT_EQ(std::get<x::ExpertFailed>(a[0]).error, x::Error::kOutOfRange);
  CheckBytes(Demand(compute, 3, first_, 1));
  auto stats = launcher_.ShutdownAndStats("expert-fetcher");
  EXPECT_EQ(stats["rejected_messages"], 6);
  EXPECT_EQ(fetcher_.Wait(), 0);
}

TEST_F(ExpertFetcherTest, RestartAfterKillReattachesAndInvalidates) {
  MakeArena(3);
  Start("pread");
  x::ExpertReady old;
  {
    Peer compute(launcher_.ctx(), launcher_.Endpoint("experts"));
    old = Demand(compute, 1, first_, 2);
  }
  auto table = ipc::SlotTable::Attach(arena_);
  const ipc::SlotRef ref{static_cast<uint32_t>(old.slot), old.generation};
  ASSERT_TRUE(table.IsCurrent(ref));
  ::kill(fetcher_.pid(), SIGKILL);
  EXPECT_EQ(fetcher_.Wait(), 128 + SIGKILL);
  Start("pread");
  EXPECT_FALSE(table.IsCurrent(ref));
  Peer compute(launcher_.ctx(), launcher_.Endpoint("experts"));
  compute.Send(x::ExpertRelease{first_, 2, old.slot, old.generation});  // stale after restart
  auto r = Demand(compute, 2, first_, 2);
  CheckBytes(r);
  auto stats = launcher_.ShutdownAndStats("expert-fetcher");
  EXPECT_EQ(stats["misses"], 1) << "the restarted fetcher starts empty";
  EXPECT_EQ(stats["rejected_messages"], 1);
}

TEST_F(ExpertFetcherTest, DumpsCacheTrace) {
  MakeArena(3);
  const std::string dir = (fs::path(K3_SVC_SCRATCH) / ("dump-" + std::to_string(::getpid()))).string();
  fs::remove_all(dir);
  Start("mmap", dir);
  Peer compute(launcher_.ctx(), launcher_.Endpoint("experts"));
  const int L = first_;
  compute.Send(x::ExpertRequest{1, L, {3, 1}, x::Priority::kDemand});
  for (const auto& m : Answers(compute, 2)) {
    const auto& r = std::get<x::ExpertReady>(m);
    compute.Send(x::ExpertRelease{r.layer, r.expert, r.slot, r.generation});
  }
  Demand(compute, 2, L + 1, 0);
  Demand(compute, 3, L, 3);
  launcher_.ShutdownAndStats("expert-fetcher");
  ASSERT_EQ(fetcher_.Wait(), 0);
  std::ifstream bin(dir + "/expert_trace.bin", std::ios::binary);
  std::vector<int32_t> pairs(8, -1);
  bin.read(reinterpret_cast<char*>(pairs.data()), 8 * sizeof(int32_t));
  EXPECT_EQ(bin.gcount(), 32);
  EXPECT_EQ(bin.peek(), EOF);
  EXPECT_EQ(pairs, (std::vector<int32_t>{L, 3, L, 1, L + 1, 0, L, 3}));
  std::ifstream hist(dir + "/expert_hist.json");
  const std::string h((std::istreambuf_iterator<char>(hist)), {});
  const std::string want = "{\"n_layers\":" + std::to_string(cfg_.num_layers) + ",\"n_experts\":" +
                           std::to_string(cfg_.num_experts) + ",\"counts\":{\"" + std::to_string(L) + ",1\":1,\"" +
                           std::to_string(L) + ",3\":2,\"" + std::to_string(L + 1) + ",0\":1}}\n";
  EXPECT_EQ(h, want);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace k3::test
