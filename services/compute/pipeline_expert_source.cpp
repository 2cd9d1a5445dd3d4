// PipelineExpertSource (pipeline_sources.h): routed experts from the expert fetcher's arena,
// requested per layer, handed out in arrival order, re-requested after a silence.
#include "pipeline_sources.h"

#include <algorithm>

#include "common/error.h"
#include "common/ipc/protocol.h"
#include "common/tensor_names.h"

namespace k3::compute {
namespace {
using Clock = std::chrono::steady_clock;
}  // namespace

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
  if (waited) c_.expert_wait_seconds += SecondsSince(t0);
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
    c_.expert_wait_seconds += SecondsSince(t0);
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
