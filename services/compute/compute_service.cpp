#include "compute_service.h"

#include <omp.h>

#include <cstdio>
#include <memory>
#include <optional>
#include <type_traits>
#include <variant>
#include <zmq.hpp>

#include "common/error.h"
#include "common/ipc/protocol.h"
#include "common/ipc/zmq_channel.h"
#include "common/plan/memory_plan.h"
#include "common/service/service_shell.h"
#include "common/state_file.h"
#include "common/tensor_names.h"
#include "forward.h"
#include "membw_probe.h"
#include "mixers.h"
#include "pipeline_sources.h"
#include "scheduler.h"

namespace k3::compute {
namespace {

using ipc::Clock;
namespace cp = ipc::compute;

zmq::socket_t Dealer(zmq::context_t& ctx, const std::string& endpoint, const std::string& identity) {
  zmq::socket_t s(ctx, zmq::socket_type::dealer);
  if (!identity.empty()) s.set(zmq::sockopt::routing_id, identity);
  s.set(zmq::sockopt::linger, 200);
  ipc::Connect(s, endpoint);
  return s;
}

// The service the shell's RunServiceLifecycle drives (common/service/service_shell.h): it
// opens the arenas and sockets, builds the Forward over the pipeline sources, and moves
// messages between the launcher's socket and the Scheduler (scheduler.h), which decides
// everything else.
class ComputeService : private SchedulerPort {
 public:
  ComputeService(const PipelineOptions& opt, zmq::context_t& ctx, svc::ControlLink& ctl)
      : opt_(opt), ctx_(ctx), ctl_(ctl), stop_(ctl) {}

  void Start();
  std::vector<ipc::control::Stat> StartStats() const { return {{"threads", static_cast<double>(omp_get_max_threads())}}; }
  // Answers Generates until a Shutdown or stop signal between requests, or a stop inside one.
  void Serve() {
    while (!Interrupted() && svc::WaitForWork(ctl_, {launcher_}, std::chrono::milliseconds(500))) core_->Drain();
  }
  void Finish() {}
  // Compute's Stats go out with each request, right before its Done.
  std::vector<ipc::control::Stat> FinalStats() const { return {}; }
  bool Interrupted() const { return core_ && core_->interrupted(); }

 private:
  // SchedulerPort: the launcher's compute socket, the control link, the stop poll.
  std::optional<cp::Message> Receive() override {
    auto m = ipc::ReceiveVerified(launcher_, false, ipc::DecodeCompute, Clock::now(), counters_.rejects);
    if (!m) return std::nullopt;
    return std::move(m->message);
  }
  void Send(Outgoing m) override {
    std::visit(
        [this](const auto& v) {
          if constexpr (std::is_same_v<std::decay_t<decltype(v)>, StatsOut>) ctl_.Stats(v.stats);
          else ipc::SendMessage(launcher_, ipc::Encode(v));
        },
        m);
  }
  bool StopRequested() override { return stop_(); }
  uint64_t ControlRejects() const override { return ctl_.rejects().rejected; }

  const PipelineOptions& opt_;
  zmq::context_t& ctx_;
  svc::ControlLink& ctl_;
  svc::StopPoll stop_;
  zmq::socket_t launcher_, trunk_, experts_;
  std::optional<ipc::ShmArena> pinned_, ring_, experts_arena_, embed_window_;
  PipelineCounters counters_;
  ModelConfig cfg_;
  std::unique_ptr<Checkpoint> ck_;
  std::unique_ptr<PipelineLayerSource> layers_;
  std::unique_ptr<PipelineExpertSource> experts_src_;
  std::unique_ptr<GlobalWeights> globals_;
  std::unique_ptr<Forward> fwd_;
  std::unique_ptr<Scheduler> core_;
};

void ComputeService::Start() {
  omp_set_num_threads(opt_.threads > 0 ? opt_.threads : omp_get_num_procs());
  cfg_ = LoadModelConfig(opt_.model_dir + "/config.json");
  cfg_.expert_inputs_bf16 = ExpertInputsBf16(opt_.expert_inputs);
  ck_ = std::make_unique<Checkpoint>(Checkpoint::Open(opt_.model_dir));
  pinned_.emplace(ipc::ShmArena::Open(opt_.pinned_arena, false));
  ring_.emplace(ipc::ShmArena::Open(opt_.ring_arena, false));
  experts_arena_.emplace(ipc::ShmArena::Open(opt_.experts_arena, false));
  if (!opt_.embed_arena.empty()) embed_window_.emplace(ipc::ShmArena::Open(opt_.embed_arena, false));
  launcher_ = Dealer(ctx_, opt_.endpoint, "compute");
  trunk_ = Dealer(ctx_, opt_.trunk, "");
  experts_ = Dealer(ctx_, opt_.experts, "");
  const auto resend = std::chrono::milliseconds(opt_.resend_ms);
  const auto slot_wait = std::chrono::milliseconds(static_cast<int64_t>(opt_.slot_wait_seconds * 1000));
  layers_ = std::make_unique<PipelineLayerSource>(cfg_, *ck_, trunk_, *pinned_, *ring_, counters_, resend,
                                                  HeadStreaming{embed_window_ ? &*embed_window_ : nullptr,
                                                                opt_.stream_lm_head});
  experts_src_ = std::make_unique<PipelineExpertSource>(cfg_, *ck_, experts_, *experts_arena_, counters_, resend,
                                                        slot_wait);
  // Waits for weights and the forward pass look for a stop (stop_ reads the socket at most
  // every 50 ms); a stop during start-up ends the process before Ready.
  layers_->SetStopCheck([this] { return stop_(); });
  experts_src_->SetStopCheck([this] { return stop_(); });
  try {
    globals_ = std::make_unique<GlobalWeights>(layers_->Globals());
  } catch (const StopAtSafePoint&) {
    throw Error(kExitInterrupted, "stopped during start-up");
  }
  fwd_ = std::make_unique<Forward>(cfg_, *globals_, *layers_, *experts_src_, layers_.get());
  fwd_->EnableHints(opt_.prefetch_hints);
  fwd_->SetStopCheck([this] { return stop_(); });
  SchedulerOptions so;
  so.max_batch = opt_.max_batch;
  so.prefix_cache_bytes = opt_.prefix_cache_bytes;
  so.prefix_store_dir = opt_.prefix_store_dir;
  so.prefix_store_bytes = opt_.prefix_store_bytes;
  so.prefix_store_interval = opt_.prefix_store_interval;
  so.prefill_chunk = opt_.prefill_chunk;
  so.tokenizer_dir = opt_.tokenizer_dir;
  so.dump_logits = opt_.dump_logits;
  so.probe_membw = opt_.probe_membw;
  so.probe_regions = {{pinned_->data(), pinned_->size()}, {experts_arena_->data(), experts_arena_->size()}};
  // What a pass uses, for the Step messages: every layer's trunk, and each expert it requests.
  so.expert_bytes.assign(static_cast<size_t>(cfg_.num_layers), 0);
  for (int l = 0; l < cfg_.num_layers; ++l) {
    so.trunk_bytes_pass += LayerTrunkRange(*ck_, cfg_, l).tensor_bytes;
    if (!cfg_.is_dense(l)) so.expert_bytes[static_cast<size_t>(l)] = ExpertRange(*ck_, l, 0).tensor_bytes;
  }
  so.identify = [this] { return state::IdentifyModel(opt_.model_dir, *ck_); };
  core_ = std::make_unique<Scheduler>(cfg_, *fwd_, counters_, static_cast<SchedulerPort&>(*this), std::move(so));
  std::fprintf(stderr, "[compute] %d threads, kernels %s, routed-expert inputs %s (%s)%s\n", omp_get_max_threads(),
               kern::ActiveIsa(), opt_.expert_inputs.c_str(), ExpertIsa(cfg_),
               opt_.prefetch_hints ? ", next-layer expert hints on" : "");
}

}  // namespace

int RunComputeService(const PipelineOptions& opt) {
  for (const std::string* s : {&opt.model_dir, &opt.control, &opt.endpoint, &opt.trunk, &opt.experts,
                               &opt.pinned_arena, &opt.ring_arena, &opt.experts_arena})
    if (s->empty())
      throw UsageError("--pipeline needs --model --control --endpoint --trunk --experts --pinned-arena "
                       "--ring-arena --experts-arena");
  return svc::RunService<ComputeService>(opt.control, "compute", opt);
}

}  // namespace k3::compute
