// k3-trunk-reader as a real process: bytes delivered equal the file bytes (every backend),
// ring read-ahead order, rejected messages, kill -9 + restart.
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "common/io/block_reader.h"
#include "common/model_config.h"
#include "common/plan/trunk_pieces.h"
#include "common/safetensors.h"
#include "common/tensor_names.h"
#include "service_harness.h"

namespace k3::test {
namespace {

namespace w = ipc::weights;
constexpr int kRingSlots = 3;

struct TrunkSetup {
  std::string model = TinyCheckpoint();
  Checkpoint ck = Checkpoint::Open(model);
  ModelConfig cfg = LoadModelConfig(model + "/config.json");
  int n = static_cast<int>(cfg.num_layers);

  // The expected bytes of layer L (L == n: the model-level tensors), straight from the file.
  std::vector<uint8_t> Expected(int layer) const {
    if (layer < n) {
      const ByteRange r = LayerTrunkRange(ck, cfg, layer);
      return FileBytes(ck.shard_paths()[r.shard], r.begin, r.end - r.begin);
    }
    int64_t b = INT64_MAX, e = 0;
    int shard = 0;
    for (ModelRole role : {ModelRole::kEmbedTokens, ModelRole::kLmHead, ModelRole::kNorm,
                           ModelRole::kOutputAttnResNorm, ModelRole::kOutputAttnResProj}) {
      const TensorInfo& t = ck.at(ModelTensorName(role));
      b = std::min(b, t.file_offset);
      e = std::max(e, t.file_offset + t.nbytes);
      shard = t.shard;
    }
    return FileBytes(ck.shard_paths()[shard], b, e - b);
  }
  // Generous sizes: the whole checkpoint fits the pinned arena; a ring slot holds any layer.
  size_t PinnedBytes() const {
    size_t total = 0;
    for (const auto& p : ck.shard_paths()) total += fs::file_size(p) + 8192;
    return total;
  }
  uint64_t SlotBytes() const {
    uint64_t m = 0;
    for (int l = 0; l < n; ++l) {
      const ByteRange r = LayerTrunkRange(ck, cfg, l);
      m = std::max<uint64_t>(m, r.end - r.begin);
    }
    return m + 8192;
  }
};

class TrunkReaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    pinned_ = ipc::ShmArena::Create(launcher_.ArenaName("trunk-pinned"), setup_.PinnedBytes());
    ring_ = ipc::ShmArena::Create(launcher_.ArenaName("trunk-ring"),
                                  ipc::SlotTable::BytesNeeded(kRingSlots, setup_.SlotBytes()));
    ipc::SlotTable::Format(ring_, kRingSlots, setup_.SlotBytes());
  }
  void TearDown() override {
    reader_.Kill9();
    pinned_.Unlink();
    ring_.Unlink();
  }
  void Start(const std::string& io, const std::string& pin) {
    reader_ = Child({K3_TRUNK_READER, "--model", setup_.model, "--control", launcher_.Endpoint("control"), "--bind",
                     launcher_.Endpoint("trunk"), "--pinned-arena", pinned_.name(), "--ring-arena", ring_.name(),
                     "--pin", pin, "--io", io, "--inflight", "4"},
                    launcher_.StderrPath("trunk-reader"));
    ASSERT_TRUE(launcher_.WaitReady("trunk-reader")) << launcher_.ReadStderr("trunk-reader");
  }
  // Checks the bytes a LayerReady announces against the file.
  void CheckBytes(const w::LayerReady& r) {
    const std::vector<uint8_t> want = setup_.Expected(r.layer);
    ASSERT_EQ(r.length, want.size()) << "layer " << r.layer;
    const uint8_t* p = nullptr;
    if (r.slot == -1) {
      ASSERT_LE(r.offset + r.length, pinned_.size());
      p = pinned_.data() + r.offset;
    } else {
      auto table = ipc::SlotTable::Attach(ring_);
      auto bytes = table.Read({static_cast<uint32_t>(r.slot), r.generation});
      ASSERT_FALSE(bytes.empty()) << "layer " << r.layer << " announced with a stale generation";
      ASSERT_LE(r.offset + r.length, bytes.size());
      p = bytes.data() + r.offset;
    }
    EXPECT_TRUE(std::equal(want.begin(), want.end(), p)) << "layer " << r.layer << " bytes differ from the file";
  }
  std::optional<w::LayerReady> NextReady(Peer& peer) {
    for (;;) {
      auto m = peer.Recv(ipc::DecodeWeights);
      if (!m) return std::nullopt;
      if (auto* r = std::get_if<w::LayerReady>(&*m)) return *r;
      ADD_FAILURE() << "unexpected weights message";
    }
  }

  FakeLauncher launcher_;
  TrunkSetup setup_;
  ipc::ShmArena pinned_, ring_;
  Child reader_;
};

TEST_F(TrunkReaderTest, DeliversFileBytesWithEveryBackend) {
  for (const std::string io : {"direct", "pread", "uring", "mmap"}) {
    SCOPED_TRACE(io);
    if (io == "direct" && !io::DirectIoSupported(setup_.ck.shard_paths()[0])) continue;
    Start(io, "1,4");
    Peer compute(launcher_.ctx(), launcher_.Endpoint("trunk"));
    compute.Send(w::LayerWant{0});
    std::set<int> seen;
    while (seen.size() < static_cast<size_t>(setup_.n + 1)) {
      auto r = NextReady(compute);
      ASSERT_TRUE(r) << "layers seen: " << seen.size() << "\n" << launcher_.ReadStderr("trunk-reader");
      const bool pinned = r->layer == 1 || r->layer == 4 || r->layer == setup_.n;
      EXPECT_EQ(r->slot == -1, pinned) << "layer " << r->layer;
      CheckBytes(*r);
      seen.insert(r->layer);
      if (r->slot >= 0) compute.Send(w::LayerDone{r->layer, r->slot, r->generation});
    }
    auto stats = launcher_.ShutdownAndStats("trunk-reader");
    EXPECT_EQ(stats["rejected_messages"], 0);
    EXPECT_GE(stats["layers_streamed"], setup_.n - 2);
    EXPECT_EQ(reader_.Wait(), 0);
  }
  EXPECT_NE(launcher_.ReadStderr("trunk-reader").find("[trunk-reader] stats: read"), std::string::npos);
}

TEST_F(TrunkReaderTest, RingReadsAheadInWalkOrder) {
  Start("pread", "6");
  Peer compute(launcher_.ctx(), launcher_.Endpoint("trunk"));
  const int n = setup_.n;
  compute.Send(w::LayerWant{n - 2});
  std::vector<int> ring_order;
  std::map<int, w::LayerReady> refs;
  int pinned_seen = 0;
  while (ring_order.size() < kRingSlots) {
    auto r = NextReady(compute);
    ASSERT_TRUE(r);
    if (r->slot == -1) {
      ++pinned_seen;
      continue;
    }
    ring_order.push_back(r->layer);
    refs[r->layer] = *r;
    CheckBytes(*r);
  }
  EXPECT_EQ(pinned_seen, 2) << "layer 6 and the globals";
  // n-2, n-1, then past the globals back to 0.
  EXPECT_EQ(ring_order, (std::vector<int>{n - 2, n - 1, 0}));
  // The ring is full: nothing more arrives until a slot is released.
  EXPECT_FALSE(compute.Recv(ipc::DecodeWeights, 300ms).has_value());
  compute.Send(w::LayerDone{n - 2, refs[n - 2].slot, refs[n - 2].generation});
  auto next = NextReady(compute);
  ASSERT_TRUE(next);
  EXPECT_EQ(next->layer, 1);
  EXPECT_EQ(next->slot, refs[n - 2].slot) << "the released slot is refilled";
  EXPECT_GT(next->generation, refs[n - 2].generation);
  CheckBytes(*next);
  // Jump to layer 5: 5, then 7 (6 is pinned), then 8 take the slots not in the new window.
  compute.Send(w::LayerWant{5});
  std::vector<int> after;
  while (after.size() < 3) {
    auto r = NextReady(compute);
    ASSERT_TRUE(r);
    if (r->slot == -1) continue;
    after.push_back(r->layer);
    CheckBytes(*r);
  }
  EXPECT_EQ(after, (std::vector<int>{5, 7, 8}));
  EXPECT_EQ(reader_.Wait(10ms), -1) << "still running";
}

// docs/trunk-pieces.md: with slots of the smallest piece, a layer arrives as pieces of several
// runs, each run's bytes where PiecePlacements says, announced as piece p of P.
TEST_F(TrunkReaderTest, StreamsLayersInPiecesWhenSlotsAreSmall) {
  std::vector<std::vector<plan::PieceTensor>> tensors;
  int64_t slot = 0;
  for (int l = 0; l < setup_.n; ++l) {
    tensors.push_back(plan::LayerPieceTensors(setup_.ck, setup_.cfg, l));
    slot = std::max(slot, plan::MinPieceSlot(tensors.back()));
  }
  ring_.Unlink();
  ring_ = ipc::ShmArena::Create(launcher_.ArenaName("trunk-ring"),
                                ipc::SlotTable::BytesNeeded(kRingSlots, static_cast<uint64_t>(slot)));
  ipc::SlotTable::Format(ring_, kRingSlots, static_cast<uint64_t>(slot));
  Start("pread", "");
  Peer compute(launcher_.ctx(), launcher_.Endpoint("trunk"));
  const ByteRange run = LayerTrunkRange(setup_.ck, setup_.cfg, 0);
  const std::vector<plan::Piece> pieces = plan::LayerPieces(tensors[0], run.end - run.begin, slot);
  ASSERT_GT(pieces.size(), 1u) << "layer 0 should not fit a " << slot << "-byte slot";
  const auto count = static_cast<int32_t>(pieces.size());
  compute.Send(w::LayerWant{0, 0});
  auto table = ipc::SlotTable::Attach(ring_);
  std::map<int32_t, w::LayerReady> arrived;
  for (int32_t p = 0; p < count; ++p) {
    while (!arrived.count(p)) {
      auto r = NextReady(compute);
      ASSERT_TRUE(r) << "piece " << p << "\n" << launcher_.ReadStderr("trunk-reader");
      if (r->slot == -1) continue;  // the globals
      ASSERT_EQ(r->layer, 0) << "the window is layer 0's pieces first";
      arrived[r->piece] = *r;
    }
    const w::LayerReady& r = arrived[p];
    EXPECT_EQ(r.pieces, count);
    EXPECT_EQ(r.offset, 0u);
    EXPECT_EQ(static_cast<int64_t>(r.length), plan::PieceSlotBytes(tensors[0], pieces[static_cast<size_t>(p)], 0));
    const auto bytes = table.Read({static_cast<uint32_t>(r.slot), r.generation});
    ASSERT_FALSE(bytes.empty());
    for (const plan::RunPlacement& pl : plan::PiecePlacements(tensors[0], pieces[static_cast<size_t>(p)])) {
      const std::vector<uint8_t> want = FileBytes(setup_.ck.shard_paths()[run.shard], pl.begin, pl.length);
      ASSERT_LE(pl.slot_offset + pl.lead() + pl.length, static_cast<int64_t>(bytes.size()));
      EXPECT_TRUE(std::equal(want.begin(), want.end(), bytes.data() + pl.slot_offset + pl.lead()))
          << "piece " << p << " run at file offset " << pl.begin;
    }
    compute.Send(w::LayerDone{0, r.slot, r.generation, p});
  }
  // A piece past the layer's last is refused, naming the range.
  compute.Send(w::LayerWant{0, count});
  for (;;) {
    auto m = compute.Recv(ipc::DecodeWeights);
    ASSERT_TRUE(m.has_value()) << "no LayerFailed for a piece out of range";
    if (auto* f = std::get_if<w::LayerFailed>(&*m)) {
      EXPECT_EQ(f->error, w::Error::kOutOfRange);
      EXPECT_NE(f->detail.find("piece"), std::string::npos) << f->detail;
      break;
    }
  }
  auto stats = launcher_.ShutdownAndStats("trunk-reader");
  EXPECT_EQ(stats["rejected_messages"], 0);
  EXPECT_GE(stats["pieces_streamed"], count);
}

TEST_F(TrunkReaderTest, RejectsMalformedAndStaleMessagesAndKeepsAnswering) {
  Start("pread", "");
  Peer compute(launcher_.ctx(), launcher_.Endpoint("trunk"));
  compute.Send(w::LayerWant{0});
  auto r0 = NextReady(compute);
  while (r0 && r0->slot == -1) r0 = NextReady(compute);  // skip the globals
  ASSERT_TRUE(r0);
  compute.SendRaw({"garbage"});                                    // 1 frame
  compute.SendRaw({std::string("\x02\x02", 2), "not a flatbuffer"});  // fails verification
  compute.Send(ipc::control::Hello{"intruder", 1});                 // wrong protocol
  compute.Send(w::LayerDone{r0->layer, r0->slot, r0->generation + 2});  // stale generation
  compute.Send(w::LayerReady{0, 0, 0, 0, 0});                       // a reader-only message
  // Still answering: an out-of-range layer gets LayerFailed, a good release frees the slot.
  compute.Send(w::LayerWant{setup_.n + 5});
  bool failed = false;
  for (int i = 0; i < 10 && !failed; ++i) {
    auto m = compute.Recv(ipc::DecodeWeights);
    ASSERT_TRUE(m);
    if (auto* f = std::get_if<w::LayerFailed>(&*m)) {
      EXPECT_EQ(f->error, w::Error::kOutOfRange);
      failed = true;
    }
  }
  EXPECT_TRUE(failed);
  compute.Send(w::LayerDone{r0->layer, r0->slot, r0->generation});
  auto stats = launcher_.ShutdownAndStats("trunk-reader");
  EXPECT_EQ(stats["rejected_messages"], 5) << launcher_.ReadStderr("trunk-reader");
  EXPECT_EQ(reader_.Wait(), 0);
}

TEST_F(TrunkReaderTest, RestartAfterKillReattachesAndInvalidates) {
  Start("pread", "");
  {
    Peer compute(launcher_.ctx(), launcher_.Endpoint("trunk"));
    compute.Send(w::LayerWant{0});
    auto r = NextReady(compute);
    while (r && r->slot == -1) r = NextReady(compute);
    ASSERT_TRUE(r);
    const ipc::SlotRef old{static_cast<uint32_t>(r->slot), r->generation};
    auto table = ipc::SlotTable::Attach(ring_);
    ASSERT_TRUE(table.IsCurrent(old));
    ::kill(reader_.pid(), SIGKILL);
    EXPECT_EQ(reader_.Wait(), 128 + SIGKILL);
    EXPECT_TRUE(table.IsCurrent(old)) << "nothing touched the ring yet";
    Start("pread", "");
    EXPECT_FALSE(table.IsCurrent(old)) << "the restarted reader must invalidate every slot";
  }
  Peer compute(launcher_.ctx(), launcher_.Endpoint("trunk"));
  compute.Send(w::LayerWant{0});
  auto r = NextReady(compute);
  while (r && r->slot == -1) r = NextReady(compute);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->layer, 0);
  CheckBytes(*r);
}

TEST_F(TrunkReaderTest, SigtermStopsWithInterruptedAndStats) {
  Start("uring", "0");
  ::kill(reader_.pid(), SIGTERM);
  std::map<std::string, double> stats;
  for (int i = 0; i < 5 && stats.empty(); ++i) {
    auto m = launcher_.Control(5s);
    ASSERT_TRUE(m) << launcher_.ReadStderr("trunk-reader");
    if (auto* s = std::get_if<ipc::control::Stats>(&m->message))
      for (const auto& st : s->stats) stats[st.name] = st.value;
  }
  EXPECT_GT(stats["bytes_read"], 0) << "pinned layer 0 and the globals were read";
  EXPECT_EQ(reader_.Wait(), 5);
}

TEST(TrunkReaderCli, BadFlagsAndMissingArenasExitWithOneLine) {
  FakeLauncher launcher;
  const std::string model = TinyCheckpoint();
  Child bad({K3_TRUNK_READER, "--model", model}, launcher.StderrPath("bad"));
  EXPECT_EQ(bad.Wait(), 2);
  Child missing({K3_TRUNK_READER, "--model", model, "--control", launcher.Endpoint("control"), "--bind",
                 launcher.Endpoint("trunk"), "--pinned-arena", "/k3-0-nonexistent", "--ring-arena",
                 "/k3-0-nonexistent2", "--io", "pread"},
                launcher.StderrPath("missing"));
  EXPECT_EQ(missing.Wait(), 1);
  EXPECT_NE(launcher.ReadStderr("missing").find("k3-trunk-reader: "), std::string::npos);
  Child badpin({K3_TRUNK_READER, "--model", model, "--control", launcher.Endpoint("control"), "--bind",
                launcher.Endpoint("trunk"), "--pinned-arena", "/x", "--ring-arena", "/y", "--pin", "1,99"},
               launcher.StderrPath("badpin"));
  EXPECT_EQ(badpin.Wait(), 2) << launcher.ReadStderr("badpin");
}

TEST(TrunkReaderCli, NothingLeftBehind) {
  {
    FakeLauncher launcher;
    auto a = ipc::ShmArena::Create(launcher.ArenaName("leak-check"), 4096);
    EXPECT_EQ(ShmLeftovers(), 1u);
  }
  EXPECT_EQ(ShmLeftovers(), 0u);
}

}  // namespace
}  // namespace k3::test
