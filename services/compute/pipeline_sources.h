// Weight sources of k3-compute's pipeline mode: trunk layers from the trunk reader's arenas
// (pinned + ring), routed experts from the expert fetcher's arena, announced over ZeroMQ
// (docs/pipeline.md). Every (slot, generation) reference is checked with IsCurrent before
// and after use; a stale reference or a silent peer (restarted service) makes the source ask
// again (LayerWant / ExpertRequest are idempotent), so a restart costs time, not tokens.
// Every wait is cut into slices of at most 50 ms that ask the stop check (set by the service),
// so a stop requested while compute waits for weights is seen within the slice.
// Single-threaded: called from the forward pass's thread only.
#pragma once
#include <zmq.hpp>

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/ipc/messages.h"
#include "common/ipc/shm_arena.h"
#include "common/ipc/slot_table.h"
#include "common/ipc/zmq_channel.h"
#include "common/plan/trunk_pieces.h"
#include "common/safetensors.h"
#include "pipeline_counters.h"
#include "sources.h"

namespace k3::compute {

// One slice of a wait for weights: throws StopAtSafePoint when `stop` (may be empty) says so,
// else returns the earlier of `deadline` and 50 ms from now.
ipc::Clock::time_point WaitSlice(const std::function<bool()>& stop, ipc::Clock::time_point deadline);
double SecondsSince(ipc::Clock::time_point t0);  // the sources' wait counters (pipeline_wait.cpp)

// What the plan streams of the model-level tensors (docs/pipeline.md "Streamed embedding and
// lm_head"): embedding rows through `embed_window` (null: resident), lm_head in ring chunks.
struct HeadStreaming {
  const ipc::ShmArena* embed_window = nullptr;
  bool lm_head = false;
};

class PipelineLayerSource : public LayerSource, public HeadSource {
 public:
  PipelineLayerSource(const ModelConfig& cfg, const Checkpoint& ck, zmq::socket_t& trunk,
                      const ipc::ShmArena& pinned, const ipc::ShmArena& ring, PipelineCounters& c,
                      std::chrono::milliseconds resend, HeadStreaming streaming = {});
  // The model-level tensors (pseudo-layer num_layers, always pinned); blocks until announced.
  // A streamed embedding / lm_head is bound without data (only Embed/Logits touch them).
  GlobalWeights Globals();
  const LayerWeights& Acquire(int64_t layer) override;
  void Release(int64_t layer) override;
  // Pinned layers, and ring layers whose announcement already arrived (read ahead); never a
  // layer that arrives in pieces (no hint then: prefetch timing changes, ids do not).
  const LayerWeights* Peek(int64_t layer) override;
  // A layer in pieces (docs/trunk-pieces.md): the next pieces, in the layer's use order.
  void Apply(int64_t layer, TensorRole role, const kern::DenseMat& W, const float* X, int64_t T,
             float* Y) override;
  kern::DenseMat Whole(int64_t layer, TensorRole role, const kern::DenseMat& W) override;
  // HeadSource (pipeline_head_source.cpp): resident views, or rows / chunks from the trunk reader.
  void Embed(const int32_t* ids, int64_t T, float* out) override;
  void Logits(const float* X, int64_t T, float* Y) override;
  void SetStopCheck(std::function<bool()> stop) { stop_ = std::move(stop); }

 private:
  bool Usable(const ipc::weights::LayerReady& r) const;
  void DrainArrived();  // handles announcements that already arrived, without blocking
  const ipc::weights::LayerReady& WaitFor(int32_t layer, int32_t piece = 0);
  // Pieces (pipeline_pieces.cpp): whether a streamed layer is cut at this slot size, binding
  // one from its small tensors, and the cursor over its pieces' runs.
  bool Pieced(int64_t layer) const;
  void CheckPieces(const ipc::weights::LayerReady& r) const;
  const LayerWeights& BeginPieced(int32_t layer);
  void TakePiece(int32_t piece);
  const plan::PieceRun& NextRun(int64_t layer, TensorRole role);  // the run at the cursor, checked
  void ReleasePiece();
  void EndPieced();
  void Handle(const ipc::weights::Message& m);
  TensorResolver Resolver(const ipc::weights::LayerReady& r, int64_t begin, int shard) const;

  const ModelConfig& cfg_;
  const Checkpoint& ck_;
  zmq::socket_t& sock_;
  const ipc::ShmArena& pinned_;
  ipc::SlotTable ring_;
  PipelineCounters& c_;
  std::chrono::milliseconds resend_;
  std::function<bool()> stop_;
  std::vector<int64_t> begin_;  // trunk_begin per layer (+ globals)
  std::vector<int> shard_;
  std::map<std::pair<int32_t, int32_t>, ipc::weights::LayerReady> ready_;  // latest per (layer, piece)
  // Per layer: trunk tensors in use order, their roles, and the pieces at the ring's slot size.
  std::vector<std::vector<plan::PieceTensor>> tensors_;
  std::vector<std::vector<TensorRole>> roles_;
  std::vector<std::vector<plan::Piece>> pieces_;
  struct PieceCursor {  // the pieced layer being computed
    int32_t layer = -1;
    int32_t piece = -1;
    size_t run = 0;  // next run of `piece`
    std::optional<ipc::weights::LayerReady> held;
    const uint8_t* base = nullptr;  // the held slot's bytes
    std::vector<plan::RunPlacement> places;
  } cur_;
  std::map<int, std::vector<uint8_t>> small_;  // copies of a pieced layer's small tensors
  std::vector<float> block_out_;
  std::map<int32_t, LayerWeights> pinned_bound_;
  LayerWeights current_;
  LayerWeights peeked_;  // a ring layer bound by Peek
  std::optional<ipc::weights::LayerReady> held_;
  // head streaming (pipeline_head_source.cpp)
  void EmbedBatch(const int32_t* ids, int64_t n, float* out);
  HeadStreaming stream_;
  kern::DenseMat embed_, lm_head_;   // resident views (data null when streamed)
  int64_t lm_chunk_rows_ = 0, lm_chunks_ = 0;
  uint64_t next_embed_request_ = 1;
  std::optional<ipc::weights::EmbedRowsReady> embed_reply_;
  std::vector<float> chunk_out_;
};

class PipelineExpertSource : public ExpertSource {
 public:
  // `slot_wait`: how long compute may sit with every expert it needs refused for lack of a
  // slot while it holds none itself (only another client's references can then free one)
  // before the request fails naming the cause.
  PipelineExpertSource(const ModelConfig& cfg, const Checkpoint& ck, zmq::socket_t& experts,
                       const ipc::ShmArena& arena, PipelineCounters& c, std::chrono::milliseconds resend,
                       std::chrono::milliseconds slot_wait);
  void Request(int64_t layer, const std::vector<int32_t>& experts) override;
  int32_t NextReady(int64_t layer) override;
  ExpertWeights Acquire(int64_t layer, int32_t expert) override;
  void Release(int64_t layer, int32_t expert) override;
  // Sent as a Prefetch-priority ExpertRequest; the fetcher keeps only the newest one.
  void Hint(int64_t layer, const std::vector<int32_t>& experts) override;
  void SetStopCheck(std::function<bool()> stop) { stop_ = std::move(stop); }

 private:
  void Send(const std::vector<int32_t>& experts);  // a Demand request for the current layer
  void SendRequest(int32_t layer, const std::vector<int32_t>& experts, ipc::experts::Priority priority);
  void WaitOne();  // receives one message (or re-requests after the resend timeout)
  void ReleaseRef(int32_t layer, int32_t expert, const ipc::SlotRef& ref);
  void CheckStarved();  // throws once every wanted expert has been refused for slot_wait_

  const ModelConfig& cfg_;
  const Checkpoint& ck_;
  zmq::socket_t& sock_;
  ipc::SlotTable table_;
  PipelineCounters& c_;
  std::chrono::milliseconds resend_, slot_wait_;
  std::function<bool()> stop_;
  std::optional<ipc::Clock::time_point> starved_since_;
  std::string no_slot_detail_;                // the fetcher's words on the last NoSlot
  uint64_t next_id_ = 1;
  int32_t layer_ = -1;
  std::set<int32_t> pending_;                 // requested, no current ExpertReady yet
  std::set<int32_t> no_slot_;                 // refused with NoSlot, retried after a Release
  std::deque<int32_t> ready_queue_;           // arrived, not yet handed out
  std::map<int32_t, ipc::SlotRef> refs_;      // arrived (handed out or queued)
};

}  // namespace k3::compute
