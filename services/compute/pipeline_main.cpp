#include "pipeline_main.h"

#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <zmq.hpp>

#include "common/error.h"
#include "common/ipc/protocol.h"
#include "common/ipc/zmq_channel.h"
#include "common/median.h"
#include "forward.h"
#include "generate.h"
#include "membw_probe.h"
#include "mixers.h"
#include "pipeline_sources.h"

namespace k3::compute {
namespace {

using Clock = std::chrono::steady_clock;

zmq::socket_t Dealer(zmq::context_t& ctx, const std::string& endpoint, const std::string& identity) {
  zmq::socket_t s(ctx, zmq::socket_type::dealer);
  if (!identity.empty()) s.set(zmq::sockopt::routing_id, identity);
  s.set(zmq::sockopt::linger, 200);
  s.connect(endpoint);
  return s;
}

ipc::control::Stat S(const char* name, double v) { return {name, v}; }

class ComputeService {
 public:
  explicit ComputeService(const PipelineOptions& opt) : opt_(opt) {}
  int Run();
  void ReportDeath(int code, const std::string& why) {
    try {
      ipc::SendMessage(control_, ipc::Encode(ipc::control::Dead{"compute", code, why}));
    } catch (const Error&) {
    }
  }
  void Connect() {
    control_ = Dealer(ctx_, opt_.control, "compute");
    ipc::SendMessage(control_, ipc::Encode(ipc::control::Hello{"compute", ::getpid()}));
  }

 private:
  void Serve(const ipc::compute::Generate& g, const std::string& /*unused*/);

  const PipelineOptions& opt_;
  zmq::context_t ctx_{1};
  zmq::socket_t control_;
  zmq::socket_t launcher_, trunk_, experts_;
  PipelineCounters counters_;
  ModelConfig cfg_;
  std::unique_ptr<Checkpoint> ck_;
  std::unique_ptr<PipelineLayerSource> layers_;
  std::unique_ptr<PipelineExpertSource> experts_src_;
  std::unique_ptr<GlobalWeights> globals_;
  std::unique_ptr<Forward> fwd_;
  std::vector<MemRegion> probe_regions_;  // pinned + expert arenas (--probe-membw)
};

void ComputeService::Serve(const ipc::compute::Generate& g, const std::string&) {
  if (g.ids.empty()) throw BadInput("Generate without prompt ids");
  for (int32_t id : g.ids)
    if (id < 0 || id >= cfg_.vocab_size) throw BadInput("prompt id " + std::to_string(id) + " outside the vocabulary");
  fwd_->Reset();
  const PipelineCounters at_start = counters_;  // waits before this request (start-up) excluded below
  GreedyParams p;
  p.ids = g.ids;
  p.gen = std::max(0, g.gen);
  p.full_recompute = g.full_recompute;
  p.prefill_chunk = g.prefill_chunk > 0 ? g.prefill_chunk : 64;
  GreedyHooks hooks;
  // Waits of the decode steps alone (the prompt pass also waits for start-up reads), so the
  // launcher can show I/O wait per generated token.
  PipelineCounters at_prefill;
  hooks.after_prefill = [&](const float* logits) {
    at_prefill = counters_;
    if (opt_.dump_logits.empty()) return;
    std::ofstream f(opt_.dump_logits, std::ios::binary | std::ios::trunc);
    f.write(reinterpret_cast<const char*>(logits), static_cast<std::streamsize>(cfg_.vocab_size * 4));
    if (!f) throw Error(kExitOutput, "--dump-logits: cannot write " + opt_.dump_logits);
  };
  std::vector<double> probe_gbs;
  hooks.on_token = [&](int32_t id, int64_t index) {
    ipc::SendMessage(launcher_, ipc::Encode(ipc::compute::Token{g.request_id, id, static_cast<int32_t>(index)}));
    if (opt_.probe_membw && index > 0) probe_gbs.push_back(ProbeReadGBs(probe_regions_));  // between steps
  };
  const GreedyResult r = RunGreedy(*fwd_, cfg_.vocab_size, p, hooks);
  const PipelineCounters& c = counters_;
  ipc::SendMessage(control_, ipc::Encode(ipc::control::Stats{
                                 "compute",
                                 {S("trunk_wait_seconds", c.trunk_wait_seconds),
                                  S("expert_wait_seconds", c.expert_wait_seconds),
                                  S("run_trunk_wait_seconds", c.trunk_wait_seconds - at_start.trunk_wait_seconds),
                                  S("run_expert_wait_seconds", c.expert_wait_seconds - at_start.expert_wait_seconds),
                                  S("decode_trunk_wait_seconds", c.trunk_wait_seconds - at_prefill.trunk_wait_seconds),
                                  S("decode_expert_wait_seconds", c.expert_wait_seconds - at_prefill.expert_wait_seconds),
                                  S("decode_steps", std::max(0.0, static_cast<double>(r.generated.size()) - 1)),
                                  S("trunk_streamed_bytes", static_cast<double>(c.trunk_streamed_bytes)),
                                  S("layer_wants", static_cast<double>(c.layer_wants)),
                                  S("expert_requests", static_cast<double>(c.expert_requests)),
                                  S("expert_rerequests", static_cast<double>(c.expert_rerequests)),
                                  S("stale_refs", static_cast<double>(c.stale_refs)),
                                  S("hints_sent", static_cast<double>(c.hints_sent)),
                                  S("hint_recall", fwd_->hint_stats().recall()),
                                  S("rejected_messages", static_cast<double>(c.rejects.rejected)),
                                  S("median_step_seconds", Median(r.token_seconds)),
                                  S("membw_probe_passes", static_cast<double>(probe_gbs.size())),
                                  S("membw_probe_median_gbs", Median(probe_gbs))}}));
  ipc::compute::Done d;
  d.request_id = g.request_id;
  d.stats.prompt_tokens = static_cast<int32_t>(g.ids.size());
  d.stats.generated_tokens = static_cast<int32_t>(r.generated.size());
  d.stats.prefill_seconds = r.prefill_seconds;
  d.stats.seconds_per_token = r.seconds_per_token;
  ipc::SendMessage(launcher_, ipc::Encode(d));
}

int ComputeService::Run() {
  omp_set_num_threads(opt_.threads > 0 ? opt_.threads : omp_get_num_procs());
  cfg_ = LoadModelConfig(opt_.model_dir + "/config.json");
  cfg_.expert_inputs_bf16 = ExpertInputsBf16(opt_.expert_inputs);
  ck_ = std::make_unique<Checkpoint>(Checkpoint::Open(opt_.model_dir));
  const ipc::ShmArena pinned = ipc::ShmArena::Open(opt_.pinned_arena, false);
  const ipc::ShmArena ring = ipc::ShmArena::Open(opt_.ring_arena, false);
  const ipc::ShmArena experts = ipc::ShmArena::Open(opt_.experts_arena, false);
  std::optional<ipc::ShmArena> embed_window;
  if (!opt_.embed_arena.empty()) embed_window.emplace(ipc::ShmArena::Open(opt_.embed_arena, false));
  probe_regions_ = {{pinned.data(), pinned.size()}, {experts.data(), experts.size()}};
  launcher_ = Dealer(ctx_, opt_.endpoint, "compute");
  trunk_ = Dealer(ctx_, opt_.trunk, "");
  experts_ = Dealer(ctx_, opt_.experts, "");
  const auto resend = std::chrono::milliseconds(opt_.resend_ms);
  layers_ = std::make_unique<PipelineLayerSource>(cfg_, *ck_, trunk_, pinned, ring, counters_, resend,
                                                  HeadStreaming{embed_window ? &*embed_window : nullptr,
                                                                opt_.stream_lm_head});
  experts_src_ = std::make_unique<PipelineExpertSource>(cfg_, *ck_, experts_, experts, counters_, resend);
  globals_ = std::make_unique<GlobalWeights>(layers_->Globals());
  fwd_ = std::make_unique<Forward>(cfg_, *globals_, *layers_, *experts_src_, layers_.get());
  fwd_->EnableHints(opt_.prefetch_hints);
  ipc::SendMessage(control_, ipc::Encode(ipc::control::Ready{"compute", {S("threads", omp_get_max_threads())}}));
  std::fprintf(stderr, "[compute] %d threads, kernels %s, routed-expert inputs %s (%s)%s\n", omp_get_max_threads(),
               kern::ActiveIsa(), opt_.expert_inputs.c_str(), ExpertIsa(cfg_),
               opt_.prefetch_hints ? ", next-layer expert hints on" : "");

  ipc::RejectCounter rejects;
  for (;;) {
    zmq::pollitem_t items[] = {{control_.handle(), 0, ZMQ_POLLIN, 0}, {launcher_.handle(), 0, ZMQ_POLLIN, 0}};
    ipc::Poll(items, 2, std::chrono::milliseconds(500));
    const auto now = Clock::now();
    while (auto m = ipc::ReceiveVerified(control_, false, ipc::DecodeControl, now, rejects))
      if (std::holds_alternative<ipc::control::Shutdown>(m->message)) return kExitOk;
    while (auto m = ipc::ReceiveVerified(launcher_, false, ipc::DecodeCompute, now, rejects))
      if (const auto* g = std::get_if<ipc::compute::Generate>(&m->message)) Serve(*g, m->identity);
    if (::getppid() == 1) return kExitRuntime;  // launcher gone
  }
}

}  // namespace

int RunComputePipeline(const PipelineOptions& opt) {
  for (const std::string* s : {&opt.model_dir, &opt.control, &opt.endpoint, &opt.trunk, &opt.experts,
                               &opt.pinned_arena, &opt.ring_arena, &opt.experts_arena})
    if (s->empty())
      throw UsageError("--pipeline needs --model --control --endpoint --trunk --experts --pinned-arena "
                       "--ring-arena --experts-arena");
  ComputeService svc(opt);
  svc.Connect();
  try {
    return svc.Run();
  } catch (const Error& e) {
    svc.ReportDeath(e.code(), e.what());
    throw;
  } catch (const std::exception& e) {
    svc.ReportDeath(kExitRuntime, e.what());
    throw;
  }
}

}  // namespace k3::compute
