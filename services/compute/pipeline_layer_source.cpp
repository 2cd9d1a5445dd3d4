// PipelineLayerSource (pipeline_sources.h): trunk layers and the globals from the trunk
// reader's announcements, bound whole (pinned, or one ring slot). Pieced layers are in
// pipeline_pieces.cpp, the streamed embedding and lm_head in pipeline_head_source.cpp.
#include "pipeline_sources.h"

#include <algorithm>

#include "common/error.h"
#include "common/ipc/protocol.h"
#include "common/plan/head_stream.h"
#include "common/read_window.h"
#include "common/tensor_names.h"

namespace k3::compute {
namespace {
using Clock = std::chrono::steady_clock;
}  // namespace

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
  if (waited) c_.trunk_wait_seconds += SecondsSince(t0);
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

}  // namespace k3::compute
