// k3-trunk-reader: reads pinned trunk layers once, streams the rest through the ring arena in
// walk order (docs/pipeline.md "Trunk"). Process shell only: flags, arenas, sockets, loop;
// the decisions live in trunk_layout.h and ring_scheduler.h.
#include <CLI/CLI.hpp>
#include <zmq.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "common/cli_parse.h"
#include "common/codec/coded_fill.h"
#include "common/codec/coded_trunk.h"
#include "common/error.h"
#include "common/ipc/protocol.h"
#include "common/ipc/shm_arena.h"
#include "common/ipc/slot_table.h"
#include "common/ipc/zmq_channel.h"
#include "common/model_config.h"
#include "common/plan/head_stream.h"
#include "common/safetensors.h"
#include "common/service/read_worker.h"
#include "common/service/service_shell.h"
#include "common/tensor_names.h"
#include "services/trunk_reader/ring_scheduler.h"
#include "services/trunk_reader/trunk_layout.h"
#include "common/process_init.h"
#include "common/run_main.h"

namespace k3::svc {
namespace {

using ipc::Clock;
namespace w = ipc::weights;
constexpr const char* kService = "trunk-reader";

struct Flags : WeightServiceFlags {
  std::string pinned_arena, ring_arena, pin;
  std::string embed_arena;     // set: the embedding is not resident; rows are served on request
  bool stream_lm_head = false;  // lm_head streams through the ring in row chunks
  std::string coded_trunk;      // set: streamed layers read from this coded trunk (docs/pipeline.md)
};

class TrunkReader {
 public:
  TrunkReader(const Flags& f, zmq::context_t& ctx, ControlLink& ctl) : f_(f), ctx_(ctx), ctl_(ctl) {}

  void Start() {
    const Checkpoint ck = Checkpoint::Open(f_.model);
    const ModelConfig cfg = LoadModelConfig(f_.model + "/config.json");
    layout_ = BuildTrunkLayout(ck, cfg, {f_.embed_arena.empty(), !f_.stream_lm_head});
    pins_ = ParsePinList(f_.pin, layout_.num_layers);
    uint64_t need = 0;
    pinned_ = PlanPinned(layout_, pins_, &need);
    pinned_arena_ = ipc::ShmArena::Open(f_.pinned_arena, true);
    if (pinned_arena_.size() < need)
      throw RuntimeFailure(f_.pinned_arena + ": pinned arena has " + std::to_string(pinned_arena_.size()) +
                           " bytes, the pinned layers and globals need " + std::to_string(need));
    ring_arena_ = ipc::ShmArena::Open(f_.ring_arena, true);
    ring_.emplace(ipc::SlotTable::Attach(ring_arena_));
    if (f_.stream_lm_head) AppendLmHeadChunks(layout_, ck, cfg, ring_->slot_bytes());
    // Layers larger than a slot stream in pieces (docs/trunk-pieces.md); a slot below a
    // layer's largest atomic tensor is refused here, naming the layer.
    try {
      CutPieces(layout_, pins_, ring_->slot_bytes());
    } catch (const Error& e) {
      throw RuntimeFailure(f_.ring_arena + ": " + e.what());
    }
    if (!f_.embed_arena.empty()) {
      embed_arena_ = ipc::ShmArena::Open(f_.embed_arena, true);
      const TensorInfo& t = ck.at(ModelTensorName(ModelRole::kEmbedTokens));
      embed_ = {t.shard, static_cast<uint64_t>(t.file_offset), static_cast<uint64_t>(t.nbytes / cfg.vocab_size),
                static_cast<int64_t>(cfg.vocab_size)};
      embed_stride_ = static_cast<uint64_t>(plan::EmbedRowStride(static_cast<int64_t>(embed_.row_bytes)));
      if (embed_arena_.size() < embed_stride_)
        throw RuntimeFailure(f_.embed_arena + ": embed window has " + std::to_string(embed_arena_.size()) +
                             " bytes, one embedding row needs " + std::to_string(embed_stride_));
      embed_file_size_ = std::filesystem::file_size(ck.shard_paths().at(static_cast<size_t>(t.shard)));
    }
    ring_->RetireAll();  // after a crash compute may still hold references
    // Walk positions: each layer's pieces, the pinned globals, then the lm_head chunks (if any).
    std::vector<int> fixed;
    for (int l : pins_) fixed.push_back(layout_.position(l, 0));
    fixed.push_back(layout_.position(layout_.globals(), 0));
    sched_.emplace(layout_.walk_length(), fixed, ring_->slot_count());
    std::vector<std::string> files = ck.shard_paths();
    if (!f_.coded_trunk.empty()) {
      OpenCodedTrunk(ck, cfg);
      coded_file_ = static_cast<int>(files.size());
      files.push_back(f_.coded_trunk + "/" + codec::kCodedTrunkDataFile);
    }
    worker_.emplace(ctx_, "trunk-io", f_.io, files, f_.inflight);
    ReadPinned();
    router_.emplace(ctx_, zmq::socket_type::router);
    router_->set(zmq::sockopt::linger, 0);
    router_->set(zmq::sockopt::router_mandatory, false);
    ipc::BindPrivate(*router_, f_.bind);
  }

  std::vector<ipc::control::Stat> StartStats() const {
    return {{"pinned_layers", static_cast<double>(pins_.size())},
            {"pinned_bytes", static_cast<double>(pinned_bytes_)},
            {"pinned_seconds", pinned_seconds_},
            {"ring_slots", static_cast<double>(ring_->slot_count())},
            {"coded_trunk", f_.coded_trunk.empty() ? 0.0 : 1.0}};
  }

  // Serves until Shutdown or a stop signal.
  void Serve() {
    for (;;) {
      if (!WaitForWork(ctl_, {*router_, worker_->notifier()}, std::chrono::milliseconds(100))) return;
      OnCompletions();
      while (auto m = ipc::ReceiveVerified(*router_, true, ipc::DecodeWeights, Clock::now(), rejects_)) {
        client_ = m->identity;
        std::visit([this](const auto& msg) { OnMessage(msg); }, m->message);
      }
      Pump();
      // The counters once a second while they move: k3-server's /metrics shows bytes read live.
      if (Clock::now() >= next_stats_ && bytes_read_ != stats_bytes_) {
        stats_bytes_ = bytes_read_;
        next_stats_ = Clock::now() + std::chrono::seconds(1);
        ctl_.Stats(FinalStats());
      }
    }
  }

  std::vector<ipc::control::Stat> FinalStats() const {
    const double secs = read_seconds_;
    return {{"bytes_read", static_cast<double>(bytes_read_)},
            {"read_mb_s", MBps(bytes_read_, secs)},
            {"read_seconds", secs},
            {"layers_streamed", static_cast<double>(layers_streamed_)},
            {"pieces_streamed", static_cast<double>(pieces_streamed_)},
            {"embed_requests", static_cast<double>(embed_requests_)},
            {"coded_bytes_read", static_cast<double>(coded_bytes_read_)},
            {"decoded_bytes", static_cast<double>(decoded_bytes_)},
            {"decode_seconds", decode_seconds_},
            {"check_seconds", check_seconds_},
            {"coded_fills", static_cast<double>(coded_fills_)},
            {"raw_fills", static_cast<double>(raw_fills_)},
            {"rejected_messages", static_cast<double>(rejects_.rejected + ctl_.rejects().rejected)}};
  }

  void Finish() const {  // prints the final stats line
    std::fprintf(stderr,
                 "[trunk-reader] stats: read %s in %.2f s (%.0f MB/s), %llu layers streamed, %llu rejected "
                 "messages\n",
                 FormatBytes(bytes_read_).c_str(), read_seconds_, MBps(bytes_read_, read_seconds_),
                 static_cast<unsigned long long>(layers_streamed_),
                 static_cast<unsigned long long>(rejects_.rejected + ctl_.rejects().rejected));
    if (!f_.coded_trunk.empty())
      std::fprintf(stderr,
                   "[trunk-reader] coded trunk: %llu layers decoded (%s coded -> %s, %.2f s decoding, %.2f s checking "
                   "digests on first read), %llu read raw\n",
                   static_cast<unsigned long long>(coded_fills_), FormatBytes(coded_bytes_read_).c_str(),
                   FormatBytes(decoded_bytes_).c_str(), decode_seconds_, check_seconds_,
                   static_cast<unsigned long long>(raw_fills_));
  }

 private:
  // The coded trunk: its manifest fits this checkpoint, its data file's header is this pack's
  // (BadModel, exit 3, naming the file otherwise). Each run's coded bytes are checked against
  // their digest the first time they are read (ParseLayerRuns).
  void OpenCodedTrunk(const Checkpoint& ck, const ModelConfig& cfg) {
    coded_ = codec::OpenCodedTrunk(f_.coded_trunk, ck, cfg);
    layer_runs_ = codec::RunsByLayer(coded_);
    checked_.assign(coded_.runs.size(), false);
  }

  // A coded read for a whole streamed layer, or nullopt (no coded trunk, a piece, an lm_head
  // chunk, a slot without room to decode in place): those are read from the release.
  std::optional<codec::CodedRead> CodedReadFor(const TrunkLayout::Position& pos) const {
    if (coded_file_ < 0 || pos.run >= layout_.num_layers || CutPiece(pos) != nullptr) return std::nullopt;
    return codec::PlanCodedRead(coded_, layer_runs_[static_cast<size_t>(pos.run)], ring_->slot_bytes());
  }

  // The coded layer in slot `s` has landed: checked, parsed and decoded in place. False when
  // its frames do not fit in place in this slot (it is then read from the release).
  bool DecodeCoded(uint32_t s, int layer, const codec::CodedRead& rd) {
    const auto t0 = Clock::now();
    const codec::LayerRuns& l = layer_runs_[static_cast<size_t>(layer)];
    const ReadRun& r = layout_.runs[static_cast<size_t>(layer)];
    uint8_t* slot = fill_dst_[s];
    bool check = false;
    for (size_t i = l.first; i < l.last; ++i) check = check || !checked_[i];
    const auto runs = codec::ParseLayerRuns(coded_, l, rd, slot, r.lead(), check);
    for (size_t i = l.first; i < l.last; ++i) checked_[i] = true;
    // The first read's digest checks are counted apart: once per run, not per token.
    (check ? check_seconds_ : decode_seconds_) += Seconds(t0);
    if (!codec::InPlaceFits(runs)) return false;
    const auto t1 = Clock::now();
    codec::DecodeInPlace(runs, slot);
    decode_seconds_ += Seconds(t1);
    decoded_bytes_ += l.source_bytes;
    coded_bytes_read_ += rd.bytes;
    ++coded_fills_;
    return true;
  }

  void ReadPinned() {
    const auto t0 = Clock::now();
    uint8_t* base = pinned_arena_.mutable_data();
    for (size_t i = 0; i < pinned_.size(); ++i) {
      const ReadRun& r = layout_.runs[static_cast<size_t>(pinned_[i].layer)];
      worker_->Submit({i, r.shard, {{r.wbegin, r.wlength(), base + pinned_[i].arena_offset}}});
    }
    size_t landed = 0;
    // Pinning progress for the launcher's live line: at most every 0.25 s, and a final one.
    double total = 0;
    for (const PinnedEntry& p : pinned_) total += static_cast<double>(layout_.runs[static_cast<size_t>(p.layer)].wlength());
    auto last_stats = Clock::now() - std::chrono::seconds(1);
    auto progress = [&](bool final) {
      if (!final && Clock::now() - last_stats < std::chrono::milliseconds(250)) return;
      last_stats = Clock::now();
      ctl_.Stats({{"pin_bytes_done", final ? total : static_cast<double>(pinned_bytes_)},
                  {"pin_bytes_total", total},
                  {"pin_seconds", Seconds(t0)}});
    };
    while (landed < pinned_.size()) {
      if (StopRequested()) throw Error(kExitInterrupted, "interrupted while reading pinned layers");
      ipc::PollIn(worker_->notifier(), Clock::now() + std::chrono::milliseconds(100));
      for (const ReadDone& d : worker_->TakeCompleted()) {
        if (!d.error.empty()) throw RuntimeFailure(d.error);
        ++landed;
        pinned_bytes_ += d.bytes;
        progress(landed == pinned_.size());
      }
    }
    pinned_seconds_ = Seconds(t0);
    // One line when done; the launcher shows the progress meanwhile (one live line).
    std::fprintf(stderr, "[trunk-reader] pinned %zu layers, %s in %.2f s, %.0f MB/s\n", landed,
                 FormatBytes(pinned_bytes_).c_str(), pinned_seconds_, MBps(pinned_bytes_, pinned_seconds_));
    bytes_read_ += pinned_bytes_;
    read_seconds_ += pinned_seconds_;
  }

  void Send(const ipc::Encoded& e) {
    if (!client_.empty()) ipc::SendMessage(*router_, e, {}, client_);
  }

  void OnMessage(const w::LayerWant& m) {
    if (m.layer < 0 || m.layer >= layout_.runs_count()) {
      Send(ipc::Encode(w::LayerFailed{m.layer, w::Error::kOutOfRange,
                                      "layer " + std::to_string(m.layer) + " outside [0, " +
                                          std::to_string(layout_.runs_count() - 1) + "]"}));
      return;
    }
    if (m.piece < 0 || m.piece >= layout_.pieces_of(m.layer)) {
      Send(ipc::Encode(w::LayerFailed{m.layer, w::Error::kOutOfRange,
                                      "layer " + std::to_string(m.layer) + " piece " + std::to_string(m.piece) +
                                          " outside [0, " + std::to_string(layout_.pieces_of(m.layer) - 1) + "]"}));
      return;
    }
    for (const PinnedEntry& p : pinned_) Send(ipc::Encode(w::LayerReady{p.layer, -1, 0, p.first_byte, p.length}));
    sched_->Want(layout_.position(m.layer, m.piece));
    // Window layers already in the ring are announced again (the Want says compute has no
    // current reference); the others will be evicted for the new window.
    const std::vector<int> window = sched_->Window();
    const auto& slots = sched_->slots();
    for (uint32_t s = 0; s < slots.size(); ++s)
      if (slots[s].state == RingScheduler::State::kReady &&
          std::find(window.begin(), window.end(), slots[s].layer) != window.end())
        AnnounceRing(s);
  }

  void OnMessage(const w::LayerDone& m) {
    if (m.slot == -1) return;  // pinned layers never move; nothing to free
    const bool known = m.layer >= 0 && m.layer < layout_.runs_count() && m.piece >= 0 && m.piece < layout_.pieces_of(m.layer);
    if (m.slot < 0 || !known ||
        !sched_->Done(layout_.position(m.layer, m.piece), static_cast<uint32_t>(m.slot), m.generation)) {
      ++rejects_.rejected;
      rejects_.last_reason = "stale LayerDone for layer " + std::to_string(m.layer) + " slot " +
                             std::to_string(m.slot) + " generation " + std::to_string(m.generation);
    }
  }

  // Embedding rows into the embed window: row i of the request lands at i * stride, read
  // through its window (docs/pipeline.md "Streamed embedding and lm_head").
  void OnMessage(const w::EmbedRows& m) {
    const uint64_t capacity = embed_arena_.size() / std::max<uint64_t>(embed_stride_, 1);
    std::string why;
    if (f_.embed_arena.empty()) why = "the embedding is resident (no embed window)";
    else if (m.ids.empty() || m.ids.size() > capacity)
      why = std::to_string(m.ids.size()) + " rows requested, the embed window holds 1.." + std::to_string(capacity);
    for (int32_t id : m.ids)
      if (why.empty() && (id < 0 || id >= embed_.vocab)) why = "token id " + std::to_string(id) + " outside the vocabulary";
    if (!why.empty()) {
      Send(ipc::Encode(w::LayerFailed{layout_.globals(), w::Error::kOutOfRange, "EmbedRows: " + why}));
      return;
    }
    ReadJob job{kEmbedTag + embed_seq_, embed_.shard, {}};
    EmbedPending pending{m.request_id, {}};
    uint8_t* base = embed_arena_.mutable_data();
    for (size_t i = 0; i < m.ids.size(); ++i) {
      const int64_t begin = static_cast<int64_t>(embed_.offset + static_cast<uint64_t>(m.ids[i]) * embed_.row_bytes);
      const int64_t row = static_cast<int64_t>(embed_.row_bytes);
      const ReadRun r = Widen({embed_.shard, begin, begin + row, row}, embed_file_size_);
      job.requests.push_back({r.wbegin, r.wlength(), base + i * embed_stride_});
      pending.offsets.push_back(i * embed_stride_ + r.lead());
    }
    embed_pending_[embed_seq_++] = std::move(pending);
    if (worker_->pending() == 0) t_busy_ = Clock::now();
    worker_->Submit(std::move(job));
  }

  void OnEmbedDone(const ReadDone& d) {
    auto it = embed_pending_.find(d.tag - kEmbedTag);
    if (it == embed_pending_.end()) return;
    if (!d.error.empty()) {
      std::cerr << "[trunk-reader] " << d.error << "\n";
      Send(ipc::Encode(w::LayerFailed{layout_.globals(), w::Error::kReadFailed, d.error}));
    } else {
      bytes_read_ += d.bytes;
      ++embed_requests_;
      Send(ipc::Encode(w::EmbedRowsReady{it->second.request_id, it->second.offsets, embed_.row_bytes}));
    }
    embed_pending_.erase(it);
  }

  template <class M>
  void OnMessage(const M&) {
    ++rejects_.rejected;
    rejects_.last_reason = "unexpected weights message from compute";
  }

  // A piece of several runs (docs/trunk-pieces.md); null for a whole run (a layer that fits a
  // slot, the globals, an lm_head chunk), which is read and announced as before pieces.
  const plan::Piece* CutPiece(const TrunkLayout::Position& p) const {
    if (p.run >= layout_.num_layers) return nullptr;
    const plan::Piece& piece = layout_.pieces[static_cast<size_t>(p.run)][static_cast<size_t>(p.piece)];
    return piece.whole_run ? nullptr : &piece;
  }

  void AnnounceRing(uint32_t s) {
    const auto& slot = sched_->slots()[s];
    const TrunkLayout::Position pos = layout_.walk[static_cast<size_t>(slot.layer)];
    const ReadRun& r = layout_.runs[static_cast<size_t>(pos.run)];
    w::LayerReady m{pos.run, static_cast<int32_t>(s), slot.generation, r.lead(), r.length(), pos.piece,
                    layout_.pieces_of(pos.run)};
    if (const plan::Piece* piece = CutPiece(pos)) {
      m.offset = 0;
      m.length = static_cast<uint64_t>(plan::PieceSlotBytes(layout_.tensors[static_cast<size_t>(pos.run)], *piece, 0));
    }
    Send(ipc::Encode(m));
  }

  void Pump() {
    while (auto f = sched_->NextFill()) {
      const TrunkLayout::Position pos = layout_.walk[static_cast<size_t>(f->layer)];
      const ReadRun& r = layout_.runs[static_cast<size_t>(pos.run)];
      uint8_t* dst = ring_->BeginFill(f->slot);
      if (worker_->pending() == 0) t_busy_ = Clock::now();
      ReadJob job{f->slot, r.shard, {}};
      fill_dst_[f->slot] = dst;
      coded_fill_[f->slot] = CodedReadFor(pos);
      if (const auto& rd = coded_fill_[f->slot]) {
        job.shard = coded_file_;
        job.requests.push_back({rd->file_offset, rd->bytes, dst + rd->slot_offset});
      } else if (const plan::Piece* piece = CutPiece(pos)) {  // one read per run, at its slot offset
        const uint64_t file_size = layout_.shard_sizes.at(static_cast<size_t>(r.shard));
        for (const plan::RunPlacement& p : plan::PiecePlacements(layout_.tensors[static_cast<size_t>(pos.run)], *piece)) {
          const ReadRun win = Widen({r.shard, p.begin, p.begin + p.length, p.length}, file_size);
          job.requests.push_back({win.wbegin, win.wlength(), dst + p.slot_offset});
        }
      } else {
        job.requests.push_back({r.wbegin, r.wlength(), dst});
      }
      worker_->Submit(std::move(job));
    }
  }

  void OnCompletions() {
    std::vector<ReadDone> done = worker_->TakeCompleted();
    if (done.empty()) return;
    for (const ReadDone& d : done) {
      if (d.tag >= kEmbedTag) {
        OnEmbedDone(d);
        continue;
      }
      const auto s = static_cast<uint32_t>(d.tag);
      const TrunkLayout::Position pos = layout_.walk[static_cast<size_t>(sched_->slots()[s].layer)];
      const int layer = pos.run;
      if (!d.error.empty()) {
        std::cerr << "[trunk-reader] " << d.error << "\n";
        sched_->Abandon(s);
        Send(ipc::Encode(w::LayerFailed{layer, w::Error::kReadFailed, d.error}));
        continue;
      }
      if (const auto rd = coded_fill_[s]) {
        coded_fill_[s].reset();
        if (!DecodeCoded(s, layer, *rd)) {  // no room to decode in place: the release's bytes
          bytes_read_ += d.bytes;
          const ReadRun& r = layout_.runs[static_cast<size_t>(layer)];
          worker_->Submit({s, r.shard, {{r.wbegin, r.wlength(), fill_dst_[s]}}});
          continue;
        }
      } else if (pos.run < layout_.num_layers) {
        ++raw_fills_;
      }
      sched_->Filled(s, ring_->Publish(s));
      bytes_read_ += d.bytes;
      if (pos.piece + 1 == layout_.pieces_of(pos.run)) ++layers_streamed_;  // a layer's last piece
      ++pieces_streamed_;
      AnnounceRing(s);
    }
    if (worker_->pending() == 0) read_seconds_ += Seconds(t_busy_);
  }

  Flags f_;
  zmq::context_t& ctx_;
  ControlLink& ctl_;
  TrunkLayout layout_;
  std::vector<int> pins_;
  std::vector<PinnedEntry> pinned_;
  ipc::ShmArena pinned_arena_, ring_arena_, embed_arena_;
  struct EmbedTensor {
    int shard = 0;
    uint64_t offset = 0, row_bytes = 0;
    int64_t vocab = 0;
  } embed_;
  struct EmbedPending {
    uint64_t request_id = 0;
    std::vector<uint64_t> offsets;
  };
  static constexpr uint64_t kEmbedTag = 1ull << 40;  // read tags above ring slot numbers
  uint64_t embed_stride_ = 0, embed_file_size_ = 0, embed_seq_ = 0, embed_requests_ = 0;
  std::map<uint64_t, EmbedPending> embed_pending_;
  std::optional<ipc::SlotTable> ring_;
  std::optional<RingScheduler> sched_;
  std::optional<ReadWorker> worker_;
  std::optional<zmq::socket_t> router_;
  std::string client_;
  ipc::RejectCounter rejects_;
  uint64_t bytes_read_ = 0, pinned_bytes_ = 0, layers_streamed_ = 0, pieces_streamed_ = 0;
  codec::CodedTrunk coded_;
  int coded_file_ = -1;  // the coded data file's index in the read worker's files (-1: none)
  std::vector<codec::LayerRuns> layer_runs_;
  std::vector<bool> checked_;  // per coded run: its digest was checked
  std::map<uint32_t, std::optional<codec::CodedRead>> coded_fill_;  // per slot being filled
  std::map<uint32_t, uint8_t*> fill_dst_;
  uint64_t coded_bytes_read_ = 0, decoded_bytes_ = 0, coded_fills_ = 0, raw_fills_ = 0;
  double decode_seconds_ = 0, check_seconds_ = 0;
  double pinned_seconds_ = 0, read_seconds_ = 0;
  Clock::time_point t_busy_;
  Clock::time_point next_stats_{};  // the next live Stats (k3-server /metrics)
  uint64_t stats_bytes_ = 0;        // bytes_read_ in the last one
};

int Main(int argc, char** argv) {
  Flags f;
  CLI::App app{"k3-trunk-reader: pinned + streamed trunk layers into shared memory"};
  AddWeightServiceFlags(app, f);
  app.add_option("--pinned-arena", f.pinned_arena, "shm name of trunk-pinned")->required();
  app.add_option("--ring-arena", f.ring_arena, "shm name of trunk-ring")->required();
  app.add_option("--pin", f.pin, "comma-separated layers to pin (globals always pinned)");
  app.add_flag("--stream-lm-head", f.stream_lm_head, "stream lm_head through the ring in row chunks");
  app.add_option("--embed-arena", f.embed_arena, "shm name of embed-window (embedding not resident)");
  app.add_option("--coded-trunk", f.coded_trunk, "coded trunk directory (k3-model pack-trunk): streamed layers read from it");
  if (!ParseCommandLine(app, argc, argv, "k3-trunk-reader")) return kExitOk;
  return RunService<TrunkReader>(f.control, kService, f);
}

}  // namespace
}  // namespace k3::svc

int main(int argc, char** argv) {
  k3::InitProcess();  // whole stderr lines, harmless signals (common/process_init.h)
  return k3::RunMain("k3-trunk-reader", [&] { return k3::svc::Main(argc, argv); });
}
