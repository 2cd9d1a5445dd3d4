#include "compute_service.h"

#include <omp.h>

#include <algorithm>
#include <deque>
#include <cstdio>
#include <fstream>
#include <memory>
#include <optional>
#include <zmq.hpp>

#include "common/error.h"
#include "common/ipc/protocol.h"
#include "common/ipc/zmq_channel.h"
#include "common/median.h"
#include "common/sampling_check.h"
#include "common/plan/memory_plan.h"
#include "common/service/service_shell.h"
#include "forward.h"
#include "generate.h"
#include "membw_probe.h"
#include "mixers.h"
#include "pipeline_sources.h"
#include "prefix_cache.h"
#include "saved_state.h"

namespace k3::compute {
namespace {

using ipc::Clock;
namespace cp = ipc::compute;

zmq::socket_t Dealer(zmq::context_t& ctx, const std::string& endpoint, const std::string& identity) {
  zmq::socket_t s(ctx, zmq::socket_type::dealer);
  if (!identity.empty()) s.set(zmq::sockopt::routing_id, identity);
  s.set(zmq::sockopt::linger, 200);
  s.connect(endpoint);
  return s;
}

ipc::control::Stat S(const char* name, double v) { return {name, v}; }

cp::StopReason WireReason(Ending e) {
  switch (e) {
    case Ending::kStopId: return cp::StopReason::kStopId;
    case Ending::kInterrupted: return cp::StopReason::kInterrupted;
    case Ending::kCancelled: return cp::StopReason::kCancelled;
    case Ending::kLength: break;
  }
  return cp::StopReason::kLength;
}

// The service the shell's RunServiceLifecycle drives (common/service/service_shell.h).
class ComputeService {
 public:
  ComputeService(const PipelineOptions& opt, zmq::context_t& ctx, svc::ControlLink& ctl)
      : opt_(opt), ctx_(ctx), ctl_(ctl), stop_(ctl) {}

  void Start();
  std::vector<ipc::control::Stat> StartStats() const { return {S("threads", omp_get_max_threads())}; }
  // Answers Generates until a Shutdown or stop signal between requests, or a stop inside one.
  // Messages that arrived during a request (kept by PollCancel) are answered first, in order.
  void Serve() {
    while (!interrupted_ && svc::WaitForWork(ctl_, {launcher_}, std::chrono::milliseconds(500)))
      while (!interrupted_) {
        std::optional<cp::Message> msg;
        if (!held_.empty()) {
          msg = std::move(held_.front());
          held_.pop_front();
        } else if (auto m = ipc::ReceiveVerified(launcher_, false, ipc::DecodeCompute, Clock::now(), counters_.rejects)) {
          msg = std::move(m->message);
        }
        if (!msg) break;
        // A Cancel between requests names a request that has already ended: nothing to do.
        if (const auto* g = std::get_if<cp::Generate>(&*msg)) Answer(*g);
        else if (const auto* op = std::get_if<cp::StateOp>(&*msg)) AnswerState(*op);
      }
  }
  void Finish() {}
  // Compute's Stats go out with each request (Answer), right before its Done.
  std::vector<ipc::control::Stat> FinalStats() const { return {}; }
  bool Interrupted() const { return interrupted_; }

 private:
  void Answer(const cp::Generate& g);
  void PrefillProgress(int64_t done, int64_t total);
  void AnswerState(const cp::StateOp& op);  // StateOp Save/Load/Reset (docs/formats.md "State file")
  bool PollCancel(uint64_t request_id);
  // Prefix reuse (prefix_cache.h), the two points a scheduler calls: a new sequence starts from
  // the longest snapshot that prefixes its prompt (returns the ids it consumed, 0 for none; the
  // forward state is then that snapshot's, else fresh), and a consistent sequence is offered.
  size_t StartFromCache(const std::vector<int32_t>& prompt);
  void OfferToCache(std::span<const int32_t> consumed);

  const PipelineOptions& opt_;
  zmq::context_t& ctx_;
  svc::ControlLink& ctl_;
  svc::StopPoll stop_;
  bool interrupted_ = false;
  zmq::socket_t launcher_, trunk_, experts_;
  std::optional<ipc::ShmArena> pinned_, ring_, experts_arena_, embed_window_;
  PipelineCounters counters_;
  ModelConfig cfg_;
  std::unique_ptr<Checkpoint> ck_;
  std::unique_ptr<PipelineLayerSource> layers_;
  std::unique_ptr<PipelineExpertSource> experts_src_;
  std::unique_ptr<GlobalWeights> globals_;
  std::unique_ptr<Forward> fwd_;
  std::vector<MemRegion> probe_regions_;  // pinned + expert arenas (--probe-membw)
  Clock::time_point last_progress_{};
  // The sequence's ids (prompts and generated, a loaded state's included); the forward state
  // has consumed the first fwd_->position() of them, the rest are fed before the next prompt.
  std::vector<int32_t> seq_ids_;
  std::optional<state::ModelIdentity> identity_;  // computed at the first StateOp
  std::deque<cp::Message> held_;  // arrived during a request, answered after it (not lost)
  PrefixCache prefix_cache_{opt_.prefix_cache_bytes};
};

size_t ComputeService::StartFromCache(const std::vector<int32_t>& prompt) {
  const PrefixSnapshot* hit = prefix_cache_.Lookup(prompt);
  if (!hit) {
    fwd_->Reset();
    return 0;
  }
  fwd_->CopyState(hit->state);  // the snapshot stays for the next request
  return hit->ids.size();
}

void ComputeService::OfferToCache(std::span<const int32_t> consumed) {
  if (fwd_->torn() || static_cast<int64_t>(consumed.size()) != fwd_->position()) return;
  if (!prefix_cache_.Fits(PrefixCache::BytesOf(consumed.size(), fwd_->state()))) return;
  prefix_cache_.Insert(consumed, fwd_->state());
}

// Between decode steps, without waiting: true when a Cancel for `request_id` has arrived. A
// Cancel for any other request is ignored; any other message (a next Generate, say) is kept
// in held_ and answered, in order, once this request is done.
bool ComputeService::PollCancel(uint64_t request_id) {
  bool cancel = false;
  while (auto m = ipc::ReceiveVerified(launcher_, false, ipc::DecodeCompute, Clock::now(), counters_.rejects)) {
    if (const auto* c = std::get_if<cp::Cancel>(&m->message)) {
      if (c->request_id == request_id) cancel = true;
    } else {
      held_.push_back(std::move(m->message));
    }
  }
  return cancel;
}

void ComputeService::Start() {
  omp_set_num_threads(opt_.threads > 0 ? opt_.threads : omp_get_num_procs());
  cfg_ = LoadModelConfig(opt_.model_dir + "/config.json");
  cfg_.expert_inputs_bf16 = ExpertInputsBf16(opt_.expert_inputs);
  ck_ = std::make_unique<Checkpoint>(Checkpoint::Open(opt_.model_dir));
  pinned_.emplace(ipc::ShmArena::Open(opt_.pinned_arena, false));
  ring_.emplace(ipc::ShmArena::Open(opt_.ring_arena, false));
  experts_arena_.emplace(ipc::ShmArena::Open(opt_.experts_arena, false));
  if (!opt_.embed_arena.empty()) embed_window_.emplace(ipc::ShmArena::Open(opt_.embed_arena, false));
  probe_regions_ = {{pinned_->data(), pinned_->size()}, {experts_arena_->data(), experts_arena_->size()}};
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
  std::fprintf(stderr, "[compute] %d threads, kernels %s, routed-expert inputs %s (%s)%s\n", omp_get_max_threads(),
               kern::ActiveIsa(), opt_.expert_inputs.c_str(), ExpertIsa(cfg_),
               opt_.prefetch_hints ? ", next-layer expert hints on" : "");
}

// Control Stats for the launcher's live progress line: after each prompt chunk, at most
// every 0.25 s, and always for the last one.
void ComputeService::PrefillProgress(int64_t done, int64_t total) {
  const auto now = Clock::now();
  if (done < total && now - last_progress_ < std::chrono::milliseconds(250)) return;
  last_progress_ = now;
  ctl_.Stats({S("prefill_tokens_done", static_cast<double>(done)),
              S("prefill_tokens_total", static_cast<double>(total))});
}

void ComputeService::AnswerState(const cp::StateOp& op) {
  cp::StateDone d;
  d.request_id = op.request_id;
  try {
    if (!identity_) identity_ = state::IdentifyModel(opt_.model_dir, *ck_);
    if (op.action == cp::StateAction::kSave) {
      if (fwd_->torn()) throw BadInput("the sequence was stopped in the middle of a pass: nothing to save");
      SaveSequence(op.path, cfg_, *identity_, fwd_->state(), seq_ids_, op.extra);
    } else if (op.action == cp::StateAction::kLoad) {
      SavedSequence s = LoadSequence(op.path, cfg_, *identity_, 0);  // the launcher checked the context
      fwd_->LoadState(std::move(s.state));
      seq_ids_ = std::move(s.ids);
      d.extra = std::move(s.extra);
    } else {
      fwd_->Reset();
      seq_ids_.clear();
    }
    d.ok = true;
  } catch (const std::exception& e) {  // a refused file leaves the state as it was
    d.error = e.what();
  }
  d.position = static_cast<int32_t>(seq_ids_.size());
  d.ids = seq_ids_;
  ipc::SendMessage(launcher_, ipc::Encode(d));
}

void ComputeService::Answer(const cp::Generate& g) {
  for (int32_t id : g.ids)
    if (id < 0 || id >= cfg_.vocab_size) throw BadInput("prompt id " + std::to_string(id) + " outside the vocabulary");
  if (const std::string bad = SamplingProblem(g.sampling, g.logprobs); !bad.empty()) throw BadInput("Generate: " + bad);
  // keep_state: the ids not consumed yet (the last generated one, say) go first, then the prompt.
  // full_recompute recomputes every step from nothing, so it feeds the whole sequence.
  std::vector<int32_t> feed;
  size_t kept = 0;    // ids of the sequence the forward state has consumed before `feed`
  size_t cached = 0;  // of them, from a prefix snapshot (a new sequence)
  const bool new_sequence = !g.keep_state;
  if (g.keep_state) {
    if (fwd_->torn()) throw BadInput("Generate keep_state after a pass that was stopped midway");
    kept = g.full_recompute ? 0 : static_cast<size_t>(fwd_->position());
    if (g.full_recompute) fwd_->Reset();
    feed.assign(seq_ids_.begin() + static_cast<std::ptrdiff_t>(kept), seq_ids_.end());
    feed.insert(feed.end(), g.ids.begin(), g.ids.end());
  } else {
    // A new sequence. Perplexity scores every prompt id and full_recompute feeds everything
    // every step: both prefill from scratch.
    const bool reuse = prefix_cache_.capacity() > 0 && !g.full_recompute && !g.perplexity;
    cached = reuse ? StartFromCache(g.ids) : 0;
    if (!reuse) fwd_->Reset();
    seq_ids_.assign(g.ids.begin(), g.ids.begin() + static_cast<std::ptrdiff_t>(cached));
    kept = cached;
    feed.assign(g.ids.begin() + static_cast<std::ptrdiff_t>(cached), g.ids.end());
  }
  if (feed.empty()) throw BadInput("Generate without prompt ids");
  const int64_t sequence = static_cast<int64_t>(kept + feed.size());  // a kept or loaded state included
  if (g.max_positions > 0 && sequence > g.max_positions)
    throw BadInput("Generate: a sequence of " + std::to_string(sequence) + " tokens does not fit max_positions " +
                   std::to_string(g.max_positions));
  const PipelineCounters at_start = counters_;  // waits before this request (start-up) excluded below
  GreedyParams p;
  p.ids = feed;
  p.prior.assign(seq_ids_.begin(), seq_ids_.begin() + static_cast<std::ptrdiff_t>(kept));
  p.gen = std::max(0, g.gen);
  p.full_recompute = g.full_recompute;
  p.prefill_chunk = g.prefill_chunk > 0 ? g.prefill_chunk : 64;
  p.stop_ids = g.stop_ids;
  p.max_positions = std::max(0, g.max_positions);
  p.sampling = g.sampling;
  p.all_positions = g.perplexity;
  if (g.spec < 0 || g.spec > plan::kMaxSpecDrafts)
    throw BadInput("Generate.spec " + std::to_string(g.spec) + " outside [0, " + std::to_string(plan::kMaxSpecDrafts) + "]");
  p.spec = g.spec;
  GreedyHooks hooks;
  // The prompt minus its last id is offered once it is consumed (the next request with the
  // same prompt, or this prompt extended, starts there); docs/pipeline.md "Prefix cache".
  if (new_sequence && prefix_cache_.capacity() > 0 && !g.full_recompute && feed.size() > 1 &&
      prefix_cache_.Fits(plan::PrefixSnapshotBytes(cfg_, static_cast<int64_t>(g.ids.size()) - 1))) {
    p.mark = static_cast<int64_t>(feed.size()) - 1;
    hooks.at_mark = [&] { OfferToCache(std::span<const int32_t>(g.ids.data(), g.ids.size() - 1)); };
  }
  PromptScorer scorer{feed};  // the ids this pass feeds (a kept state's last id first)
  if (g.perplexity)
    hooks.on_prompt_chunk = [&](const float* chunk, int64_t T) { scorer.Chunk(chunk, T, cfg_.vocab_size); };
  Logprobs chosen_lp;  // of the token on_token sends next (--logprobs)
  if (g.logprobs >= 0)
    hooks.on_chosen = [&](const float* logits, int32_t id, int64_t) {
      chosen_lp = TokenLogprobs(logits, cfg_.vocab_size, id, g.logprobs);
    };
  // Waits of the decode steps alone (the prompt pass also waits for start-up reads), so the
  // launcher can show I/O wait per generated token.
  PipelineCounters at_prefill = counters_;
  last_progress_ = {};
  hooks.on_prefill_progress = [&](int64_t done, int64_t total) { PrefillProgress(done, total); };
  hooks.after_prefill = [&](const float* logits) {
    at_prefill = counters_;
    if (opt_.dump_logits.empty()) return;
    std::ofstream f(opt_.dump_logits, std::ios::binary | std::ios::trunc);
    f.write(reinterpret_cast<const char*>(logits), static_cast<std::streamsize>(cfg_.vocab_size * 4));
    if (!f) throw Error(kExitOutput, "--dump-logits: cannot write " + opt_.dump_logits);
  };
  std::vector<double> probe_gbs;
  hooks.on_token = [&](int32_t id, int64_t index) {
    cp::Token t;
    t.request_id = g.request_id;
    t.id = id;
    t.index = static_cast<int32_t>(index);
    if (g.logprobs >= 0) {
      t.logprob = static_cast<float>(chosen_lp.logprob);
      for (const auto& [alt, lp] : chosen_lp.top) t.top.push_back({alt, static_cast<float>(lp)});
    }
    ipc::SendMessage(launcher_, ipc::Encode(t));
    if (opt_.probe_membw && index > 0) probe_gbs.push_back(ProbeReadGBs(probe_regions_));  // between steps
  };
  hooks.should_stop = [this] { return stop_(); };
  hooks.cancelled = [&] { return PollCancel(g.request_id); };
  const GreedyResult r = RunGreedy(*fwd_, cfg_.vocab_size, p, hooks);
  interrupted_ = r.ending == Ending::kInterrupted;
  seq_ids_.resize(kept);
  seq_ids_.insert(seq_ids_.end(), r.full.begin(), r.full.end());
  // The whole sequence as far as it was consumed (all but the last generated id): the next
  // turn of a chat sends it back with its new message.
  if (new_sequence && !interrupted_ && prefix_cache_.capacity() > 0 && !g.full_recompute &&
      seq_ids_.size() >= static_cast<size_t>(fwd_->position()))
    OfferToCache(std::span<const int32_t>(seq_ids_.data(), static_cast<size_t>(fwd_->position())));
  // Stats first, then Done (the launcher's report waits for both; docs/pipeline.md).
  const PipelineCounters& c = counters_;
  ctl_.Stats({S("trunk_wait_seconds", c.trunk_wait_seconds),
              S("expert_wait_seconds", c.expert_wait_seconds),
              S("run_trunk_wait_seconds", c.trunk_wait_seconds - at_start.trunk_wait_seconds),
              S("run_expert_wait_seconds", c.expert_wait_seconds - at_start.expert_wait_seconds),
              S("decode_trunk_wait_seconds", c.trunk_wait_seconds - at_prefill.trunk_wait_seconds),
              S("decode_expert_wait_seconds", c.expert_wait_seconds - at_prefill.expert_wait_seconds),
              S("decode_steps", static_cast<double>(r.token_seconds.size())),
              S("trunk_streamed_bytes", static_cast<double>(c.trunk_streamed_bytes)),
              S("layer_wants", static_cast<double>(c.layer_wants)),
              S("expert_requests", static_cast<double>(c.expert_requests)),
              S("expert_rerequests", static_cast<double>(c.expert_rerequests)),
              S("stale_refs", static_cast<double>(c.stale_refs)),
              S("hints_sent", static_cast<double>(c.hints_sent)),
              S("hint_recall", fwd_->hint_stats().recall()),
              S("rejected_messages", static_cast<double>(c.rejects.rejected + ctl_.rejects().rejected)),
              S("median_step_seconds", Median(r.token_seconds)),
              S("membw_probe_passes", static_cast<double>(probe_gbs.size())),
              S("membw_probe_median_gbs", Median(probe_gbs)),
              S("spec_drafted", static_cast<double>(r.spec_drafted)),
              S("spec_accepted", static_cast<double>(r.spec_accepted))});
  cp::Done d;
  d.request_id = g.request_id;
  d.reason = WireReason(r.ending);
  d.stats.prompt_tokens = static_cast<int32_t>(g.ids.size());
  d.stats.generated_tokens = static_cast<int32_t>(r.generated.size());
  d.stats.prefill_seconds = r.prefill_seconds;
  d.stats.seconds_per_token = r.seconds_per_token;
  d.stats.position = static_cast<int32_t>(seq_ids_.size());
  d.stats.scored_tokens = static_cast<int32_t>(scorer.scored);
  d.stats.nll_sum = scorer.nll_sum;
  d.stats.spec_drafted = static_cast<int32_t>(r.spec_drafted);
  d.stats.spec_accepted = static_cast<int32_t>(r.spec_accepted);
  d.stats.cached_tokens = static_cast<int32_t>(cached);
  ipc::SendMessage(launcher_, ipc::Encode(d));
  const char* how = r.ending == Ending::kStopId        ? "stop id"
                    : r.ending == Ending::kInterrupted ? "interrupted"
                    : r.ending == Ending::kCancelled   ? "cancel"
                                                       : "length";
  std::fprintf(stderr,
               "[compute] stats: %zu tokens generated (ended by %s), prefill %.2f s, %.4f s/token, "
               "waits trunk %.2f s expert %.2f s, %llu rejected messages; %zu prompt ids from the prefix cache "
               "(%zu snapshots, %s)\n",
               r.generated.size(), how, r.prefill_seconds, r.seconds_per_token,
               c.trunk_wait_seconds - at_start.trunk_wait_seconds, c.expert_wait_seconds - at_start.expert_wait_seconds,
               static_cast<unsigned long long>(c.rejects.rejected + ctl_.rejects().rejected), cached,
               prefix_cache_.size(), plan::FormatBytes(prefix_cache_.bytes()).c_str());
}

}  // namespace

int RunComputeService(const PipelineOptions& opt) {
  for (const std::string* s : {&opt.model_dir, &opt.control, &opt.endpoint, &opt.trunk, &opt.experts,
                               &opt.pinned_arena, &opt.ring_arena, &opt.experts_arena})
    if (s->empty())
      throw UsageError("--pipeline needs --model --control --endpoint --trunk --experts --pinned-arena "
                       "--ring-arena --experts-arena");
  svc::InstallStopSignals();
  zmq::context_t ctx;
  svc::ControlLink ctl(ctx, opt.control, "compute");
  return svc::RunServiceLifecycle<ComputeService>("k3-compute", ctl, opt, ctx, ctl);
}

}  // namespace k3::compute
