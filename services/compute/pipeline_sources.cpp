#include "pipeline_sources.h"

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstring>
#include <span>

#include "common/error.h"
#include "common/ipc/protocol.h"
#include "common/plan/head_stream.h"
#include "common/read_window.h"
#include "common/tensor_names.h"

namespace k3::compute {
namespace {

using Clock = std::chrono::steady_clock;
double Since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

}  // namespace

ipc::Clock::time_point WaitSlice(const std::function<bool()>& stop, ipc::Clock::time_point deadline) {
  if (stop && stop()) throw StopAtSafePoint{};
  return std::min(deadline, ipc::Clock::now() + std::chrono::milliseconds(50));
}

// ---------------------------------------------------------------------------- trunk layers

PipelineLayerSource::PipelineLayerSource(const ModelConfig& cfg, const Checkpoint& ck, zmq::socket_t& trunk,
                                         const ipc::ShmArena& pinned, const ipc::ShmArena& ring,
                                         PipelineCounters& c, std::chrono::milliseconds resend,
                                         HeadStreaming streaming)
    : cfg_(cfg), ck_(ck), sock_(trunk), pinned_(pinned), ring_(ipc::SlotTable::Attach(ring)), c_(c),
      resend_(resend), stream_(streaming) {
  for (int l = 0; l < cfg.num_layers; ++l) {
    const ByteRange r = LayerTrunkRange(ck, cfg, l);
    begin_.push_back(r.begin);
    shard_.push_back(r.shard);
    // The same cut as the trunk reader's (trunk_layout.cpp CutPieces), from the same slot size.
    tensors_.push_back(plan::LayerPieceTensors(ck, cfg, l));
    roles_.emplace_back();
    for (const plan::UseEntry& e : plan::LayerUseOrder(cfg, l)) roles_.back().push_back(e.role);
    const int64_t slot = static_cast<int64_t>(ring_.slot_bytes());
    if (slot >= plan::MinPieceSlot(tensors_.back())) pieces_.push_back(plan::LayerPieces(tensors_.back(), r.end - r.begin, slot));
    else pieces_.emplace_back();  // cannot stream: must be pinned (the reader refuses otherwise)
  }
  // Globals pseudo-layer: the run of the model-level tensors kept resident.
  const ByteRange g = GlobalsRange(ck, {!stream_.embed_window, !stream_.lm_head});
  begin_.push_back(g.begin);
  shard_.push_back(g.shard);
  if (stream_.lm_head) {
    const TensorInfo& t = ck.at(ModelTensorName(ModelRole::kLmHead));
    lm_chunk_rows_ = plan::LmHeadChunkRows(static_cast<int64_t>(ring_.slot_bytes()), t.nbytes / cfg.vocab_size,
                                           cfg.vocab_size);
    if (lm_chunk_rows_ < 1) throw RuntimeFailure("trunk ring slots are too small for one lm_head row");
    lm_chunks_ = plan::LmHeadChunks(lm_chunk_rows_, cfg.vocab_size);
  }
}

bool PipelineLayerSource::Usable(const ipc::weights::LayerReady& r) const {
  if (r.slot < 0) return true;  // pinned: never moves
  return ring_.IsCurrent({static_cast<uint32_t>(r.slot), r.generation});
}

void PipelineLayerSource::Handle(const ipc::weights::Message& m) {
  if (const auto* r = std::get_if<ipc::weights::LayerReady>(&m)) {
    if (r->layer < 0 || r->layer > cfg_.num_layers + lm_chunks_) return;  // not ours: ignore
    if (r->slot >= 0 && static_cast<uint32_t>(r->slot) >= ring_.slot_count()) return;
    if (r->piece < 0 || r->piece >= r->pieces) return;
    ready_[{r->layer, r->piece}] = *r;
  } else if (const auto* e = std::get_if<ipc::weights::EmbedRowsReady>(&m)) {
    embed_reply_ = *e;
  } else if (const auto* f = std::get_if<ipc::weights::LayerFailed>(&m)) {
    throw RuntimeFailure("trunk reader: layer " + std::to_string(f->layer) + ": " + f->detail);
  }
}

const ipc::weights::LayerReady& PipelineLayerSource::WaitFor(int32_t layer, int32_t piece) {
  const auto t0 = Clock::now();
  bool waited = false;
  const std::pair<int32_t, int32_t> key{layer, piece};
  for (;;) {
    auto it = ready_.find(key);
    if (it != ready_.end() && Usable(it->second)) break;
    if (it != ready_.end()) {
      ++c_.stale_refs;
      ready_.erase(it);
    }
    // No current announcement: ask (again) and wait up to the resend timeout.
    ipc::SendMessage(sock_, ipc::Encode(ipc::weights::LayerWant{layer, piece}));
    ++c_.layer_wants;
    waited = true;
    const auto deadline = Clock::now() + resend_;
    while (Clock::now() < deadline) {
      auto msg = ipc::ReceiveVerified(sock_, false, ipc::DecodeWeights, WaitSlice(stop_, deadline), c_.rejects);
      if (!msg) continue;
      Handle(msg->message);
      auto jt = ready_.find(key);
      if (jt != ready_.end() && Usable(jt->second)) break;
    }
  }
  DrainArrived();  // read-ahead announcements
  if (waited) c_.trunk_wait_seconds += Since(t0);
  return ready_.at(key);
}

TensorResolver PipelineLayerSource::Resolver(const ipc::weights::LayerReady& r, int64_t begin, int shard) const {
  const uint8_t* base = nullptr;
  uint64_t limit = 0;
  if (r.slot < 0) {
    base = pinned_.data();
    limit = pinned_.size();
  } else {
    const auto span = ring_.Read({static_cast<uint32_t>(r.slot), r.generation});
    base = span.data();
    limit = span.size();
  }
  if (!base || r.offset > limit || r.length > limit - r.offset)
    throw RuntimeFailure("trunk reader: layer " + std::to_string(r.layer) + " announced outside its arena");
  base += r.offset;
  const uint64_t length = r.length;
  return [this, base, begin, shard, length](const std::string& name) {
    const TensorInfo& info = ck_.at(name);
    if (info.shard != shard || info.file_offset < begin ||
        static_cast<uint64_t>(info.file_offset - begin + info.nbytes) > length)
      throw RuntimeFailure("tensor " + name + " is outside its layer's announced run");
    return RawTensor{base + (info.file_offset - begin), &info};
  };
}

GlobalWeights PipelineLayerSource::Globals() {
  const int32_t g = static_cast<int32_t>(cfg_.num_layers);
  const auto r = WaitFor(g);
  if (r.slot >= 0) throw RuntimeFailure("trunk reader: the globals must be pinned");
  const TensorResolver in_run = Resolver(r, begin_.back(), shard_.back());
  const std::string embed_name = ModelTensorName(ModelRole::kEmbedTokens);
  const std::string head_name = ModelTensorName(ModelRole::kLmHead);
  // Streamed tensors are bound for their shape and dtype only (a placeholder address the
  // binder never reads, cleared right after); their bytes never get here.
  static const uint8_t kPlaceholder = 0;
  GlobalWeights w = BindGlobals(cfg_, [&](const std::string& name) {
    if ((name == embed_name && stream_.embed_window) || (name == head_name && stream_.lm_head))
      return RawTensor{&kPlaceholder, &ck_.at(name)};
    return in_run(name);
  });
  if (stream_.embed_window) w.embed.data = nullptr;
  if (stream_.lm_head) w.lm_head.data = nullptr;
  embed_ = w.embed;
  lm_head_ = w.lm_head;
  return w;
}

const LayerWeights& PipelineLayerSource::Acquire(int64_t layer) {
  const int32_t l = static_cast<int32_t>(layer);
  if (cur_.layer >= 0) EndPieced();  // a pass cut short (stop at a safe point) left a piece held
  if (auto it = pinned_bound_.find(l); it != pinned_bound_.end()) return it->second;
  for (;;) {
    const ipc::weights::LayerReady r = WaitFor(l);
    CheckPieces(r);
    if (r.slot >= 0 && Pieced(layer)) return BeginPieced(l);
    LayerWeights w = BindLayer(cfg_, layer, Resolver(r, begin_[layer], shard_[layer]));
    if (!Usable(r)) {  // refilled while binding: ask again
      ++c_.stale_refs;
      ready_.erase({l, 0});
      continue;
    }
    if (r.slot < 0) return pinned_bound_.emplace(l, std::move(w)).first->second;
    current_ = std::move(w);
    held_ = r;
    c_.trunk_streamed_bytes += r.length;
    return current_;
  }
}

void PipelineLayerSource::DrainArrived() {
  while (auto msg = ipc::ReceiveVerified(sock_, false, ipc::DecodeWeights, Clock::now(), c_.rejects))
    Handle(msg->message);
}

const LayerWeights* PipelineLayerSource::Peek(int64_t layer) {
  const int32_t l = static_cast<int32_t>(layer);
  if (auto it = pinned_bound_.find(l); it != pinned_bound_.end()) return &it->second;
  DrainArrived();
  const auto it = ready_.find({l, 0});
  if (it == ready_.end() || !Usable(it->second)) return nullptr;
  if (it->second.slot >= 0 && Pieced(layer)) return nullptr;
  LayerWeights w = BindLayer(cfg_, layer, Resolver(it->second, begin_[layer], shard_[layer]));
  if (it->second.slot < 0) return &pinned_bound_.emplace(l, std::move(w)).first->second;
  peeked_ = std::move(w);
  return &peeked_;
}

void PipelineLayerSource::Release(int64_t layer) {
  if (cur_.layer == layer) {
    EndPieced();
    return;
  }
  if (!held_ || held_->layer != layer) return;  // pinned
  if (!Usable(*held_)) ++c_.stale_refs;  // a restarted reader invalidated it (bytes untouched)
  ipc::SendMessage(sock_, ipc::Encode(ipc::weights::LayerDone{held_->layer, held_->slot, held_->generation}));
  ready_.erase({held_->layer, 0});
  held_.reset();
}

// ---------------------------------------------------------------------------- trunk pieces

bool PipelineLayerSource::Pieced(int64_t layer) const {
  const auto& p = pieces_.at(static_cast<size_t>(layer));
  return p.size() > 1 || (p.size() == 1 && !p[0].whole_run);
}

void PipelineLayerSource::CheckPieces(const ipc::weights::LayerReady& r) const {
  if (r.slot < 0 || r.layer >= cfg_.num_layers) return;  // pinned, globals, lm_head chunks: one piece
  const auto expected = static_cast<int32_t>(pieces_.at(static_cast<size_t>(r.layer)).size());
  if (r.pieces != expected)
    throw RuntimeFailure("trunk reader: layer " + std::to_string(r.layer) + " has " + std::to_string(r.pieces) +
                         " pieces, compute expects " + std::to_string(expected));
}

// Takes piece `piece` of the cursor's layer into the cursor (the previous one is released).
void PipelineLayerSource::TakePiece(int32_t piece) {
  ReleasePiece();
  const plan::Piece& p = pieces_[static_cast<size_t>(cur_.layer)].at(static_cast<size_t>(piece));
  for (;;) {
    const ipc::weights::LayerReady r = WaitFor(cur_.layer, piece);
    CheckPieces(r);
    const auto span = r.slot >= 0 ? ring_.Read({static_cast<uint32_t>(r.slot), r.generation})
                                  : std::span<const uint8_t>{};
    const int64_t need = plan::PieceSlotBytes(tensors_[static_cast<size_t>(cur_.layer)], p, 0);
    if (span.empty()) {  // refilled under us, or a pinned answer to a piece: ask again
      ++c_.stale_refs;
      ready_.erase({cur_.layer, piece});
      continue;
    }
    if (r.offset != 0 || r.length != static_cast<uint64_t>(need) || span.size() < static_cast<size_t>(need))
      throw RuntimeFailure("trunk reader: layer " + std::to_string(cur_.layer) + " piece " + std::to_string(piece) +
                           " announced with " + std::to_string(r.length) + " bytes, compute expects " +
                           std::to_string(need));
    cur_.piece = piece;
    cur_.run = 0;
    cur_.held = r;
    cur_.base = span.data();
    cur_.places = plan::PiecePlacements(tensors_[static_cast<size_t>(cur_.layer)], p);
    c_.trunk_streamed_bytes += r.length;
    return;
  }
}

void PipelineLayerSource::ReleasePiece() {
  if (!cur_.held) return;
  if (!Usable(*cur_.held)) ++c_.stale_refs;
  const auto& h = *cur_.held;
  ipc::SendMessage(sock_, ipc::Encode(ipc::weights::LayerDone{h.layer, h.slot, h.generation, h.piece}));
  ready_.erase({h.layer, h.piece});
  cur_.held.reset();
  cur_.base = nullptr;
}

void PipelineLayerSource::EndPieced() {
  ReleasePiece();
  cur_ = PieceCursor{};
  small_.clear();
}

// The run at the cursor, taking the next piece when the held one is used up; it must be the
// next rows of `role` (a different tensor is a bug in the use-order table, not input).
const plan::PieceRun& PipelineLayerSource::NextRun(int64_t layer, TensorRole role) {
  const auto& pieces = pieces_.at(static_cast<size_t>(layer));
  if (cur_.layer != layer || cur_.piece < 0) throw RuntimeFailure("layer " + std::to_string(layer) + ": piece order");
  if (!cur_.held || cur_.run == pieces[static_cast<size_t>(cur_.piece)].runs.size()) {
    if (cur_.piece + 1 >= static_cast<int32_t>(pieces.size()))
      throw RuntimeFailure("layer " + std::to_string(layer) + ": piece order (past the last piece)");
    TakePiece(cur_.piece + 1);
  }
  const plan::PieceRun& run = pieces[static_cast<size_t>(cur_.piece)].runs[cur_.run];
  if (roles_[static_cast<size_t>(layer)][static_cast<size_t>(run.tensor)] != role)
    throw RuntimeFailure("layer " + std::to_string(layer) + ": piece order (" +
                         tensors_[static_cast<size_t>(layer)][static_cast<size_t>(run.tensor)].name + " is next, not " +
                         LayerTensorName(static_cast<int>(layer), role) + ")");
  return run;
}

const LayerWeights& PipelineLayerSource::BeginPieced(int32_t layer) {
  // The small group (the atomic tensors at the head of the use order) is copied out: BindLayer
  // widens it, and it may span pieces.
  const auto& tensors = tensors_[static_cast<size_t>(layer)];
  const auto& pieces = pieces_[static_cast<size_t>(layer)];
  size_t small = 0;
  while (small < tensors.size() && !tensors[small].splittable && roles_[static_cast<size_t>(layer)][small] != TensorRole::kMlaKvBProj)
    ++small;
  for (;;) {
    cur_ = PieceCursor{};
    cur_.layer = layer;
    small_.clear();
    TakePiece(0);
    bool stale = false;
    for (size_t i = 0; i < small && !stale; ++i) {
      if (cur_.run == pieces[static_cast<size_t>(cur_.piece)].runs.size()) {
        if (!Usable(*cur_.held)) {
          stale = true;
          break;
        }
        TakePiece(cur_.piece + 1);
      }
      const plan::PieceRun& run = pieces[static_cast<size_t>(cur_.piece)].runs[cur_.run];
      if (run.tensor != static_cast<int>(i)) throw RuntimeFailure("layer " + std::to_string(layer) + ": piece order");
      const plan::RunPlacement& pl = cur_.places[cur_.run];
      const uint8_t* at = cur_.base + pl.slot_offset + pl.lead();
      small_[static_cast<int>(i)].assign(at, at + pl.length);
      ++cur_.run;
    }
    if (!stale && Usable(*cur_.held)) break;
    // A restarted reader bumped the generation while we copied: drop the piece, start again.
    ++c_.stale_refs;
    ready_.erase({layer, cur_.piece});
    cur_.held.reset();
  }
  std::map<std::string, int> index;
  for (size_t i = 0; i < small; ++i) index[tensors[i].name] = static_cast<int>(i);
  static const uint8_t kShapeOnly = 0;  // matrices: bound for shape and dtype, read through Apply
  current_ = BindLayer(cfg_, layer, [&](const std::string& name) {
    const auto it = index.find(name);
    return RawTensor{it == index.end() ? &kShapeOnly : small_.at(it->second).data(), &ck_.at(name)};
  });
  const TrunkRef ref{this, layer};
  current_.kda.trunk = current_.mla.trunk = current_.moe.trunk = ref;
  current_.dense_ffn.trunk = current_.moe.shared.trunk = ref;
  return current_;
}

void PipelineLayerSource::Apply(int64_t layer, TensorRole role, const kern::DenseMat& W, const float* X, int64_t T,
                                float* Y) {
  int64_t done = 0;  // rows of W computed
  while (done < W.rows) {
    const plan::PieceRun& run = NextRun(layer, role);
    const plan::PieceTensor& t = tensors_[static_cast<size_t>(layer)][static_cast<size_t>(run.tensor)];
    const int64_t r0 = t.splittable ? run.row0 : 0, n = t.splittable ? run.rows : W.rows;
    if (r0 != done || r0 + n > W.rows) throw RuntimeFailure("layer " + std::to_string(layer) + ": piece order (rows)");
    const plan::RunPlacement& pl = cur_.places[cur_.run];
    const kern::DenseMat view{cur_.base + pl.slot_offset + pl.lead(), W.format, n, W.cols};
    if (T == 1 || n == W.rows) {
      kern::Matmul(view, X, T, Y + (T == 1 ? r0 : 0));
    } else {  // Matmul writes [T][n]; scatter into [T][rows]
      block_out_.resize(static_cast<size_t>(T * n));
      kern::Matmul(view, X, T, block_out_.data());
      for (int64_t i = 0; i < T; ++i)
        std::memcpy(Y + i * W.rows + r0, block_out_.data() + i * n, static_cast<size_t>(n) * sizeof(float));
    }
    done += n;
    ++cur_.run;
  }
  // A piece used up goes back at once, so the reader can refill its slot while compute works.
  if (cur_.held && cur_.run == pieces_[static_cast<size_t>(layer)][static_cast<size_t>(cur_.piece)].runs.size())
    ReleasePiece();
}

kern::DenseMat PipelineLayerSource::Whole(int64_t layer, TensorRole role, const kern::DenseMat& W) {
  const plan::PieceRun& run = NextRun(layer, role);
  const plan::PieceTensor& t = tensors_[static_cast<size_t>(layer)][static_cast<size_t>(run.tensor)];
  if (t.splittable && (run.row0 != 0 || run.rows != W.rows))
    throw RuntimeFailure("layer " + std::to_string(layer) + ": " + t.name + " must arrive whole");
  const plan::RunPlacement& pl = cur_.places[cur_.run];
  ++cur_.run;  // its piece stays held until the next Apply takes another
  return {cur_.base + pl.slot_offset + pl.lead(), W.format, W.rows, W.cols};
}

// ---------------------------------------------------------------------------- experts

PipelineExpertSource::PipelineExpertSource(const ModelConfig& cfg, const Checkpoint& ck, zmq::socket_t& experts,
                                           const ipc::ShmArena& arena, PipelineCounters& c,
                                           std::chrono::milliseconds resend, std::chrono::milliseconds slot_wait)
    : cfg_(cfg), ck_(ck), sock_(experts), table_(ipc::SlotTable::Attach(arena)), c_(c), resend_(resend),
      slot_wait_(slot_wait) {}

void PipelineExpertSource::SendRequest(int32_t layer, const std::vector<int32_t>& experts,
                                       ipc::experts::Priority priority) {
  ipc::experts::ExpertRequest req;
  req.request_id = next_id_++;
  req.layer = layer;
  req.experts = experts;
  req.priority = priority;
  ipc::SendMessage(sock_, ipc::Encode(req));
}

void PipelineExpertSource::Send(const std::vector<int32_t>& experts) {
  SendRequest(layer_, experts, ipc::experts::Priority::kDemand);
}

void PipelineExpertSource::Request(int64_t layer, const std::vector<int32_t>& experts) {
  layer_ = static_cast<int32_t>(layer);
  pending_ = {experts.begin(), experts.end()};
  no_slot_.clear();
  ready_queue_.clear();
  refs_.clear();
  starved_since_.reset();
  ++c_.expert_requests;
  Send(experts);
}

void PipelineExpertSource::Hint(int64_t layer, const std::vector<int32_t>& experts) {
  SendRequest(static_cast<int32_t>(layer), experts, ipc::experts::Priority::kPrefetch);
  ++c_.hints_sent;
}

void PipelineExpertSource::ReleaseRef(int32_t layer, int32_t expert, const ipc::SlotRef& ref) {
  ipc::SendMessage(sock_, ipc::Encode(ipc::experts::ExpertRelease{layer, expert, static_cast<int32_t>(ref.slot),
                                                                   ref.generation}));
}

// Starved: every expert still missing was refused with NoSlot and compute holds no slot of
// its own, so no Release of ours can free one; only another client of the fetcher can.
void PipelineExpertSource::CheckStarved() {
  bool starved = !no_slot_.empty() && refs_.empty();
  for (int32_t e : pending_) starved = starved && no_slot_.count(e) != 0;
  if (!starved) {
    starved_since_.reset();
    return;
  }
  const auto now = Clock::now();
  if (!starved_since_) starved_since_ = now;
  if (now - *starved_since_ < slot_wait_) return;
  char waited[32];
  std::snprintf(waited, sizeof waited, "%g", std::chrono::duration<double>(slot_wait_).count());
  throw RuntimeFailure("expert fetcher: no free slot for layer " + std::to_string(layer_) + " expert " +
                       std::to_string(*no_slot_.begin()) + " in " + waited + " s (" + no_slot_detail_ +
                       "); another client of the fetcher is keeping them");
}

void PipelineExpertSource::WaitOne() {
  const auto deadline = Clock::now() + resend_;
  std::optional<ipc::Received<ipc::experts::Message>> msg;
  while (!msg && Clock::now() < deadline) {
    CheckStarved();
    msg = ipc::ReceiveVerified(sock_, false, ipc::DecodeExperts, WaitSlice(stop_, deadline), c_.rejects);
  }
  if (!msg) {  // silent fetcher (restarted?): ask again for everything still missing
    if (!pending_.empty()) {
      ++c_.expert_rerequests;
      Send({pending_.begin(), pending_.end()});
    }
    return;
  }
  if (const auto* r = std::get_if<ipc::experts::ExpertReady>(&msg->message)) {
    const bool sane = r->slot >= 0 && static_cast<uint32_t>(r->slot) < table_.slot_count();
    const ipc::SlotRef ref{static_cast<uint32_t>(std::max(r->slot, 0)), r->generation};
    const bool wanted = r->layer == layer_ && pending_.count(r->expert) != 0;
    if (!sane) return;
    if (!wanted) {  // duplicate or from an earlier layer: the fetcher holds it for us, let go
      ReleaseRef(r->layer, r->expert, ref);
      return;
    }
    if (!table_.IsCurrent(ref)) {  // refilled before we got to it
      ++c_.stale_refs;
      ++c_.expert_rerequests;
      Send({r->expert});
      return;
    }
    pending_.erase(r->expert);
    refs_[r->expert] = ref;
    ready_queue_.push_back(r->expert);
  } else if (const auto* f = std::get_if<ipc::experts::ExpertFailed>(&msg->message)) {
    // Every slot is held (a small arena): ask again once we have released one.
    if (f->error == ipc::experts::Error::kNoSlot && f->layer == layer_ && pending_.count(f->expert)) {
      no_slot_.insert(f->expert);
      no_slot_detail_ = f->detail;
      return;
    }
    if (f->layer == layer_ && pending_.count(f->expert))
      throw RuntimeFailure("expert fetcher: layer " + std::to_string(f->layer) + " expert " +
                           std::to_string(f->expert) + ": " + f->detail);
  }
}

int32_t PipelineExpertSource::NextReady(int64_t layer) {
  if (layer != layer_) throw RuntimeFailure("expert source: NextReady for a layer that was not requested");
  const auto t0 = Clock::now();
  bool waited = false;
  while (ready_queue_.empty()) {
    if (pending_.empty()) throw RuntimeFailure("expert source: NextReady with nothing requested");
    waited = true;
    WaitOne();
  }
  if (waited) c_.expert_wait_seconds += Since(t0);
  const int32_t e = ready_queue_.front();
  ready_queue_.pop_front();
  return e;
}

ExpertWeights PipelineExpertSource::Acquire(int64_t layer, int32_t expert) {
  const ByteRange range = ExpertRange(ck_, static_cast<int>(layer), expert);
  for (;;) {
    auto it = refs_.find(expert);
    if (it != refs_.end()) {
      const auto bytes = table_.Read(it->second);
      // The fetcher reads the run through its window (common/read_window.h): byte b is at
      // slot + lead + (b - begin).
      const int64_t lead = range.begin - AlignDown(range.begin);
      if (!bytes.empty() && static_cast<uint64_t>(range.end - range.begin + lead) <= bytes.size()) {
        const uint8_t* base = bytes.data() + lead;
        TensorResolver find = [&](const std::string& name) {
          const TensorInfo& info = ck_.at(name);
          return RawTensor{base + (info.file_offset - range.begin), &info};
        };
        ExpertWeights w = BindExpert(cfg_, layer, expert, find);
        if (table_.IsCurrent(it->second)) return w;
      }
      // Stale (a restarted fetcher invalidated it): ask for this expert again.
      ++c_.stale_refs;
      refs_.erase(it);
    }
    pending_.insert(expert);
    ++c_.expert_rerequests;
    Send({expert});
    const auto t0 = Clock::now();
    while (!refs_.count(expert)) WaitOne();
    c_.expert_wait_seconds += Since(t0);
    // It was queued again by WaitOne; it is being handed out now.
    ready_queue_.erase(std::remove(ready_queue_.begin(), ready_queue_.end(), expert), ready_queue_.end());
  }
}

void PipelineExpertSource::Release(int64_t layer, int32_t expert) {
  auto it = refs_.find(expert);
  if (it == refs_.end()) return;
  if (!table_.IsCurrent(it->second)) ++c_.stale_refs;
  ReleaseRef(static_cast<int32_t>(layer), expert, it->second);
  refs_.erase(it);
  if (!no_slot_.empty()) {  // a slot is free now: retry what was refused for lack of one
    std::vector<int32_t> retry;
    for (int32_t e : no_slot_)
      if (pending_.count(e)) retry.push_back(e);
    no_slot_.clear();
    if (!retry.empty()) {
      ++c_.expert_rerequests;
      Send(retry);
    }
  }
}

}  // namespace k3::compute
