// The services' pure cores: pin lists, ring walk order, LRU + holds, trace files.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "common/error.h"
#include "services/expert_fetcher/cache_trace.h"
#include "services/expert_fetcher/expert_cache.h"
#include "services/trunk_reader/ring_scheduler.h"
#include "services/trunk_reader/trunk_layout.h"
#include "tests/pipeline/services/service_harness.h"

namespace k3::svc {
namespace {

TEST(PinList, ParsesSortsAndRejects) {
  EXPECT_EQ(ParsePinList("", 10), std::vector<int>{});
  EXPECT_EQ(ParsePinList("7,0,3,3", 10), (std::vector<int>{0, 3, 7}));
  for (const char* bad : {"10", "-1", "a", "1,,2", "1,", ",1", "1 2", "99999999999"}) {
    try {
      ParsePinList(bad, 10);
      ADD_FAILURE() << "accepted " << bad;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), kExitUsage) << bad;
    }
  }
}

TEST(PinnedPlan, PacksAlignedWithGlobalsLast) {
  TrunkLayout l;
  l.num_layers = 3;
  // Runs with unaligned starts; widened windows as BuildTrunkLayout makes them.
  auto run = [](uint64_t b, uint64_t e) { return ReadRun{0, b, e, b / 4096 * 4096, (e + 4095) / 4096 * 4096}; };
  l.runs = {run(100, 5000), run(5000, 9000), run(9000, 20000), run(20000, 20100)};
  uint64_t total = 0;
  auto p = PlanPinned(l, {2, 0}, &total);
  ASSERT_EQ(p.size(), 3u);
  EXPECT_EQ(p[0].layer, 0);
  EXPECT_EQ(p[0].arena_offset, 0u);
  EXPECT_EQ(p[0].first_byte, 100u);
  EXPECT_EQ(p[0].length, 4900u);
  EXPECT_EQ(p[1].layer, 2);
  EXPECT_EQ(p[1].arena_offset, 8192u);          // layer 0 window is [0, 8192)
  EXPECT_EQ(p[1].first_byte, 8192u + 9000 - 8192);
  EXPECT_EQ(p[2].layer, 3);                      // globals
  EXPECT_EQ(p[2].arena_offset, 8192u + 20480 - 8192);
  EXPECT_EQ(total, p[2].arena_offset + 4096);  // window [16384, 20480) covers 20000..20100
}

// docs/trunk-pieces.md §9 step 1: the pieces of every layer, cut from the shard headers, read
// each byte of the layer's tensors exactly once, and every run fits its slot at an aligned offset.
TEST(TrunkPiecesLayout, PiecesCoverExactlyEachLayersTensors) {
  const std::string dir = test::TinyCheckpoint();
  const Checkpoint ck = Checkpoint::Open(dir);
  const ModelConfig cfg = LoadModelConfig(dir + "/config.json");
  TrunkLayout layout = BuildTrunkLayout(ck, cfg);
  int64_t min_slot = 0, widest = 0;
  for (int l = 0; l < layout.num_layers; ++l) {
    min_slot = std::max(min_slot, plan::MinPieceSlot(layout.tensors[static_cast<size_t>(l)]));
    widest = std::max(widest, static_cast<int64_t>(layout.runs[static_cast<size_t>(l)].wlength()) + 4096);
  }
  for (const int64_t slot : {min_slot, 3 * min_slot + 4096, widest}) {
    SCOPED_TRACE("slot " + std::to_string(slot));
    CutPieces(layout, {2}, static_cast<uint64_t>(slot));
    int cut_layers = 0;
    size_t positions = 0;
    for (int l = 0; l < layout.num_layers; ++l) {
      const auto& tensors = layout.tensors[static_cast<size_t>(l)];
      const auto& pieces = layout.pieces[static_cast<size_t>(l)];
      positions += pieces.size();
      // What the layer must deliver: each tensor's bytes, from the shard header.
      std::vector<std::pair<int64_t, int64_t>> want, got;
      for (const std::string& name : LayerTrunkNames(cfg, l)) {
        const TensorInfo& t = ck.at(name);
        want.push_back({t.file_offset, t.file_offset + t.nbytes});
      }
      if (pieces.size() == 1 && pieces[0].whole_run) {
        const ReadRun& r = layout.runs[static_cast<size_t>(l)];
        for (auto [b, e] : want) EXPECT_TRUE(b >= static_cast<int64_t>(r.begin) && e <= static_cast<int64_t>(r.end));
        EXPECT_TRUE(l == 2 || static_cast<int64_t>(r.length()) + 4096 <= slot) << "layer " << l << " fits a slot";
        continue;
      }
      ++cut_layers;
      EXPECT_NE(l, 2) << "a pinned layer is one whole piece";
      for (const plan::Piece& p : pieces) {
        int64_t end = 0;
        for (const plan::RunPlacement& pl : plan::PiecePlacements(tensors, p)) {
          EXPECT_EQ(pl.slot_offset % 4096, 0);
          EXPECT_GE(pl.slot_offset, end) << "runs overlap in the slot";
          end = pl.slot_offset + pl.lead() + pl.length;
          EXPECT_LE(end, slot) << "layer " << l << ": a run past its slot";
          got.push_back({pl.begin, pl.begin + pl.length});
        }
      }
      std::sort(want.begin(), want.end());
      std::sort(got.begin(), got.end());
      // Merge adjacent intervals on both sides; equal merged lists + equal totals = exactly once.
      auto merged = [](std::vector<std::pair<int64_t, int64_t>> v) {
        std::vector<std::pair<int64_t, int64_t>> out;
        for (auto iv : v) {
          if (!out.empty() && iv.first == out.back().second) out.back().second = iv.second;
          else out.push_back(iv);
        }
        return out;
      };
      int64_t want_bytes = 0, got_bytes = 0;
      for (auto [b, e] : want) want_bytes += e - b;
      for (auto [b, e] : got) got_bytes += e - b;
      EXPECT_EQ(got_bytes, want_bytes) << "layer " << l;
      EXPECT_EQ(merged(got), merged(want)) << "layer " << l;
    }
    if (slot == min_slot) {
      EXPECT_GT(cut_layers, 0) << "the smallest slot cuts some layer";
    }
    if (slot == widest) {
      EXPECT_EQ(cut_layers, 0);
    }
    EXPECT_EQ(static_cast<size_t>(layout.walk_length()), positions + 1) << "pieces, then the globals";
  }
}

TEST(RingScheduler, FillsWindowInWalkOrderSkippingPinned) {
  RingScheduler r(6, {2}, 3);
  EXPECT_FALSE(r.NextFill().has_value()) << "nothing is read before the first Want";
  r.Want(1);
  std::vector<int> order;
  while (auto f = r.NextFill()) order.push_back(f->layer);
  EXPECT_EQ(order, (std::vector<int>{1, 3, 4}));
  // Slots are Filling: no more fills until one lands and is done.
  r.Filled(0, 2);
  EXPECT_FALSE(r.Done(1, 0, 4)) << "wrong generation";
  EXPECT_FALSE(r.Done(3, 0, 2)) << "wrong layer";
  EXPECT_TRUE(r.Done(1, 0, 2));
  EXPECT_FALSE(r.Done(1, 0, 2)) << "released twice";
  auto f = r.NextFill();
  ASSERT_TRUE(f);
  EXPECT_EQ(f->layer, 5);
  EXPECT_EQ(f->slot, 0u);
}

TEST(RingScheduler, WrapsAroundGlobalsAndJumpsOnWant) {
  RingScheduler r(4, {0}, 2);
  r.Want(3);
  auto a = r.NextFill(), b = r.NextFill();
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a->layer, 3);
  EXPECT_EQ(b->layer, 1) << "after 3 come the globals (pinned) and 0 (pinned)";
  r.Filled(a->slot, 2);
  r.Filled(b->slot, 2);
  // Compute jumps to layer 2: layer 3 stays in the window, layer 1's slot is reused.
  r.Want(2);
  auto c = r.NextFill();
  ASSERT_TRUE(c);
  EXPECT_EQ(c->layer, 2);
  EXPECT_EQ(c->slot, b->slot);
  EXPECT_EQ(r.Window(), (std::vector<int>{2, 3}));
  // Wanting a pinned layer starts the window at the next streamed one.
  r.Want(0);
  EXPECT_EQ(r.head(), 1);
  RingScheduler all_pinned(2, {0, 1}, 2);
  all_pinned.Want(0);
  EXPECT_FALSE(all_pinned.NextFill());
}

TEST(ExpertCache, LruSkipsHeldAndFilling) {
  ExpertCache c(3);
  for (int e = 0; e < 3; ++e) {
    auto v = c.PickVictim();
    ASSERT_TRUE(v);
    c.StartFill(*v, {1, e});
    EXPECT_EQ(c.slot(*v).state, ExpertCache::State::kFilling);
  }
  EXPECT_FALSE(c.PickVictim()) << "every slot is filling";
  for (uint32_t s = 0; s < 3; ++s) c.FinishFill(s, 2);
  c.Hold(*c.Find({1, 0}));
  c.Touch(*c.Find({1, 1}));  // 1 is now most recent, 2 least recent unheld
  EXPECT_EQ(c.PickVictim(), c.Find({1, 2}));
  c.Hold(*c.Find({1, 2}));
  EXPECT_EQ(c.PickVictim(), c.Find({1, 1}));
  c.Hold(*c.Find({1, 1}));
  EXPECT_FALSE(c.PickVictim()) << "every slot is held";
  const uint32_t s1 = *c.Find({1, 1});
  EXPECT_FALSE(c.Release(s1, 4)) << "stale generation";
  EXPECT_TRUE(c.Release(s1, 2));
  EXPECT_FALSE(c.Release(s1, 2)) << "no hold left";
  EXPECT_EQ(c.PickVictim(), s1);
  c.StartFill(s1, {2, 5});
  EXPECT_FALSE(c.Find({1, 1})) << "evicted key is forgotten";
  EXPECT_EQ(c.Find({2, 5}), s1);
}

TEST(CacheTrace, WritesReferenceFormats) {
  CacheTrace t(4, 8);
  t.Record(1, 7, false);
  t.Record(2, 0, false);
  t.Record(1, 7, true);
  EXPECT_EQ(t.hits(), 1u);
  EXPECT_EQ(t.misses(), 2u);
  EXPECT_EQ(t.HistJson(), "{\"n_layers\":4,\"n_experts\":8,\"counts\":{\"1,7\":2,\"2,0\":1}}\n");
  const auto dir = std::filesystem::path(K3_SVC_SCRATCH) / ("trace-" + std::to_string(::getpid()));
  t.Write(dir.string());
  std::ifstream f(dir / "expert_trace.bin", std::ios::binary);
  std::vector<unsigned char> b((std::istreambuf_iterator<char>(f)), {});
  const std::vector<unsigned char> want = {1, 0, 0, 0, 7, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 7, 0, 0, 0};
  EXPECT_EQ(b, want);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace k3::svc
