#include "compute_service.h"

#include <omp.h>

#include <algorithm>
#include <deque>
#include <cstdio>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <zmq.hpp>

#include "common/error.h"
#include "common/ipc/protocol.h"
#include "common/ipc/zmq_channel.h"
#include "common/median.h"
#include "common/sampling_check.h"
#include "common/plan/memory_plan.h"
#include "common/service/service_shell.h"
#include "batch_sequence.h"
#include "common/tensor_names.h"
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
  // Messages that arrived during a request (kept by PollMessages) are answered first, in order.
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
        if (const auto* g = std::get_if<cp::Generate>(&*msg)) {
          if (Batchable(*g)) ServeBatch(*g);
          else Answer(*g);
        }
        else if (const auto* op = std::get_if<cp::StateOp>(&*msg)) AnswerState(*op);
      }
  }
  void Finish() {}
  // Compute's Stats go out with each request (Answer), right before its Done.
  std::vector<ipc::control::Stat> FinalStats() const { return {}; }
  bool Interrupted() const { return interrupted_; }

 private:
  // What one request carries besides its sequence: the Generate, what its hooks keep, the
  // counters at its start; batched requests also their sequence (batch_sequence.h).
  struct Request {
    cp::Generate g;
    std::vector<int32_t> feed;  // the ids this request feeds (a kept state's unconsumed ones first)
    size_t kept = 0;            // ids of a kept sequence (or a prefix snapshot) before feed
    size_t cached = 0;          // of them, from a prefix snapshot (RunStats.cached_tokens)
    GreedyParams p;
    PromptScorer scorer;
    Logprobs chosen_lp;  // of the token on_token sends next (--logprobs)
    std::vector<double> probe_gbs;
    PipelineCounters at_start, at_prefill;
    bool cancel = false;  // a Cancel for it arrived
    std::unique_ptr<BatchedSequence> seq;
  };
  // Generates a batch runs: new sequences, decoded incrementally (--spec is then ignored above
  // max_batch 1: the same ids). Others (keep_state, full_recompute, --spec at max_batch 1) run
  // alone through RunGreedy, after the batch drains.
  bool Batchable(const cp::Generate& g) const {
    return !g.keep_state && !g.full_recompute && (g.spec == 0 || opt_.max_batch > 1);
  }
  std::unique_ptr<Request> Prepare(const cp::Generate& g, bool batched);  // checks it (BadInput)
  GreedyHooks HooksFor(Request& r);
  void Answer(const cp::Generate& g);   // alone, through RunGreedy
  void ServeBatch(const cp::Generate& first);
  void Admit(const cp::Generate& g);
  void BatchStep();
  // A new sequence's state (the one place a sequence starts; it reuses the kept sequence's
  // memory, and the kept sequence is dropped as a new request always did): a copy of the
  // longest prefix snapshot of its prompt, else fresh (StartFromCache).
  SequenceState InitSequence(Request& r);
  // Prefix reuse (prefix_cache.h; docs/pipeline.md "Prefix cache"), for a new sequence, run in
  // a batch or alone. StartFromCache: the longest snapshot that prefixes r's prompt (null: none,
  // or r never starts from one); r then feeds only the rest (kept, cached, feed, p.ids, p.prior
  // and seq_ids_ say so) and the caller copies the snapshot into the sequence's own state.
  // OfferCache sets r's snapshot points, the prompt minus its last id (p.mark, hooks.at_mark)
  // and the sequence at its end (OfferEnd), each taken from `state` (r's own sequence).
  const PrefixSnapshot* StartFromCache(Request& r);
  void OfferCache(Request& r, GreedyHooks& hooks, std::function<const SequenceState*()> state);
  void OfferEnd(const Request& r, const std::vector<int32_t>& consumed_ids, const SequenceState& state, bool torn);
  void OfferToCache(std::span<const int32_t> consumed, const SequenceState& state);
  void Finish(Request& r, const GreedyResult& res);  // Stats, then Done
  void PrefillProgress(int64_t done, int64_t total);
  void AnswerState(const cp::StateOp& op);  // StateOp Save/Load/Reset (docs/formats.md "State file")
  void PollMessages();  // Cancels mark running requests; anything else waits in held_
  cp::Step MakeStep(int32_t sequences, int64_t rows, int64_t prefill_rows, double seconds,
                    std::vector<uint64_t> ids) const;
  void FlushStep();  // sends pending_step_, if any

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
  std::vector<Request*> active_;  // the requests running now (batched or alone)
  std::vector<std::unique_ptr<Request>> batch_;  // the batched ones, in admission order
  std::optional<cp::Step> pending_step_;  // of the last pass, sent after its Tokens
  int64_t trunk_bytes_pass_ = 0;              // every layer's trunk tensors (one pass uses them all)
  std::vector<int64_t> expert_bytes_;         // per layer: one routed expert (0 for dense layers)
  PrefixCache prefix_cache_{opt_.prefix_cache_bytes};
};

const PrefixSnapshot* ComputeService::StartFromCache(Request& r) {
  const cp::Generate& g = r.g;
  // Perplexity scores every prompt id and full_recompute feeds everything every step: both
  // prefill from scratch. keep_state continues the kept sequence.
  if (prefix_cache_.capacity() == 0 || g.keep_state || g.full_recompute || g.perplexity) return nullptr;
  const PrefixSnapshot* hit = prefix_cache_.Lookup(g.ids);
  if (!hit) return nullptr;
  r.cached = r.kept = hit->ids.size();
  r.feed.assign(g.ids.begin() + static_cast<std::ptrdiff_t>(r.cached), g.ids.end());
  r.p.ids = r.feed;
  r.p.prior = hit->ids;  // the sampler sees them as the sequence's first ids: a fresh run's draws
  r.scorer = PromptScorer{r.feed};
  return hit;
}

void ComputeService::OfferCache(Request& r, GreedyHooks& hooks, std::function<const SequenceState*()> state) {
  const cp::Generate& g = r.g;
  if (prefix_cache_.capacity() == 0 || g.keep_state || g.full_recompute || r.feed.size() < 2) return;
  if (!prefix_cache_.Fits(plan::PrefixSnapshotBytes(cfg_, static_cast<int64_t>(g.ids.size()) - 1))) return;
  r.p.mark = static_cast<int64_t>(r.feed.size()) - 1;
  hooks.at_mark = [this, &r, state = std::move(state)] {
    if (const SequenceState* s = state())
      OfferToCache(std::span<const int32_t>(r.g.ids.data(), r.g.ids.size() - 1), *s);
  };
}

// The whole sequence as far as it was consumed (all but the last generated id, never fed): the
// next turn of a chat sends it back with its new message. Not after a stop (half-updated, or the
// process ends).
void ComputeService::OfferEnd(const Request& r, const std::vector<int32_t>& ids, const SequenceState& state,
                              bool torn) {
  const cp::Generate& g = r.g;
  if (prefix_cache_.capacity() == 0 || g.keep_state || g.full_recompute || torn || interrupted_) return;
  if (ids.size() < static_cast<size_t>(state.position)) return;
  OfferToCache(std::span<const int32_t>(ids.data(), static_cast<size_t>(state.position)), state);
}

void ComputeService::OfferToCache(std::span<const int32_t> consumed, const SequenceState& state) {
  if (static_cast<int64_t>(consumed.size()) != state.position) return;
  if (!prefix_cache_.Fits(PrefixCache::BytesOf(consumed.size(), state))) return;
  prefix_cache_.Insert(consumed, state);
}

// Between passes, without waiting: a Cancel marks the running request it names (any other
// is ignored: that request has ended, or not started); any other message (a next Generate,
// say) is kept in held_ and answered, in order, when there is room for it.
void ComputeService::PollMessages() {
  while (auto m = ipc::ReceiveVerified(launcher_, false, ipc::DecodeCompute, Clock::now(), counters_.rejects)) {
    if (const auto* c = std::get_if<cp::Cancel>(&m->message)) {
      for (Request* r : active_)
        if (r->g.request_id == c->request_id) r->cancel = true;
    } else {
      held_.push_back(std::move(m->message));
    }
  }
}

cp::Step ComputeService::MakeStep(int32_t sequences, int64_t rows, int64_t prefill_rows, double seconds,
                                  std::vector<uint64_t> ids) const {
  cp::Step st;
  st.sequences = sequences;
  st.rows = static_cast<int32_t>(rows);
  st.prefill_rows = static_cast<int32_t>(prefill_rows);
  st.seconds = seconds;
  st.trunk_bytes = trunk_bytes_pass_;
  const std::vector<int64_t>& e = fwd_->pass_experts();
  for (size_t l = 0; l < e.size() && l < expert_bytes_.size(); ++l) {
    st.experts += static_cast<int32_t>(e[l]);
    st.expert_bytes += e[l] * expert_bytes_[l];
  }
  st.request_ids = std::move(ids);
  return st;
}

void ComputeService::FlushStep() {
  if (!pending_step_) return;
  ipc::SendMessage(launcher_, ipc::Encode(*pending_step_));
  pending_step_.reset();
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
  // What a pass uses, for the Step messages: every layer's trunk, and each expert it requests.
  expert_bytes_.assign(static_cast<size_t>(cfg_.num_layers), 0);
  for (int l = 0; l < cfg_.num_layers; ++l) {
    trunk_bytes_pass_ += LayerTrunkRange(*ck_, cfg_, l).tensor_bytes;
    if (!cfg_.is_dense(l)) expert_bytes_[static_cast<size_t>(l)] = ExpertRange(*ck_, l, 0).tensor_bytes;
  }
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

std::unique_ptr<ComputeService::Request> ComputeService::Prepare(const cp::Generate& g, bool batched) {
  for (int32_t id : g.ids)
    if (id < 0 || id >= cfg_.vocab_size) throw BadInput("prompt id " + std::to_string(id) + " outside the vocabulary");
  if (const std::string bad = SamplingProblem(g.sampling, g.logprobs); !bad.empty()) throw BadInput("Generate: " + bad);
  if (g.spec < 0 || g.spec > plan::kMaxSpecDrafts)
    throw BadInput("Generate.spec " + std::to_string(g.spec) + " outside [0, " + std::to_string(plan::kMaxSpecDrafts) + "]");
  auto r = std::make_unique<Request>();
  r->g = g;
  // keep_state: the ids not consumed yet (the last generated one, say) go first, then the prompt.
  // full_recompute recomputes every step from nothing, so it feeds the whole sequence.
  if (g.keep_state) {
    if (fwd_->torn()) throw BadInput("Generate keep_state after a pass that was stopped midway");
    r->kept = g.full_recompute ? 0 : static_cast<size_t>(fwd_->position());
    r->feed.assign(seq_ids_.begin() + static_cast<std::ptrdiff_t>(r->kept), seq_ids_.end());
  }
  r->feed.insert(r->feed.end(), g.ids.begin(), g.ids.end());
  if (r->feed.empty()) throw BadInput("Generate without prompt ids");
  const int64_t sequence = static_cast<int64_t>(r->kept + r->feed.size());  // a kept or loaded state included
  if (g.max_positions > 0 && sequence > g.max_positions)
    throw BadInput("Generate: a sequence of " + std::to_string(sequence) + " tokens does not fit max_positions " +
                   std::to_string(g.max_positions));
  if (!batched) {  // checked: now the kept sequence may change
    if (g.keep_state && g.full_recompute) fwd_->Reset();
    if (!g.keep_state) {
      fwd_->Reset();
      seq_ids_.clear();
    }
  }
  r->at_start = r->at_prefill = counters_;  // waits before this request (start-up) excluded below
  GreedyParams& p = r->p;
  p.ids = r->feed;
  p.prior.assign(seq_ids_.begin(), seq_ids_.begin() + static_cast<std::ptrdiff_t>(r->kept));
  p.gen = std::max(0, g.gen);
  p.full_recompute = g.full_recompute;
  p.prefill_chunk = g.prefill_chunk > 0 ? g.prefill_chunk : 64;
  p.stop_ids = g.stop_ids;
  p.max_positions = std::max(0, g.max_positions);
  p.sampling = g.sampling;
  p.all_positions = g.perplexity;
  p.spec = batched ? 0 : g.spec;
  r->scorer = PromptScorer{r->feed};  // the ids this pass feeds (a kept state's last id first)
  return r;
}

GreedyHooks ComputeService::HooksFor(Request& r) {
  GreedyHooks hooks;
  const cp::Generate& g = r.g;
  if (g.perplexity)
    hooks.on_prompt_chunk = [this, &r](const float* chunk, int64_t T) { r.scorer.Chunk(chunk, T, cfg_.vocab_size); };
  if (g.logprobs >= 0)
    hooks.on_chosen = [this, &r](const float* logits, int32_t id, int64_t) {
      r.chosen_lp = TokenLogprobs(logits, cfg_.vocab_size, id, r.g.logprobs);
    };
  // Waits of the decode steps alone (the prompt pass also waits for start-up reads), so the
  // launcher can show I/O wait per generated token.
  last_progress_ = {};
  hooks.on_prefill_progress = [this](int64_t done, int64_t total) { PrefillProgress(done, total); };
  hooks.after_prefill = [this, &r](const float* logits) {
    r.at_prefill = counters_;
    if (opt_.dump_logits.empty()) return;
    std::ofstream f(opt_.dump_logits, std::ios::binary | std::ios::trunc);
    f.write(reinterpret_cast<const char*>(logits), static_cast<std::streamsize>(cfg_.vocab_size * 4));
    if (!f) throw Error(kExitOutput, "--dump-logits: cannot write " + opt_.dump_logits);
  };
  hooks.on_token = [this, &r](int32_t id, int64_t index) {
    cp::Token t;
    t.request_id = r.g.request_id;
    t.id = id;
    t.index = static_cast<int32_t>(index);
    if (r.g.logprobs >= 0) {
      t.logprob = static_cast<float>(r.chosen_lp.logprob);
      for (const auto& [alt, lp] : r.chosen_lp.top) t.top.push_back({alt, static_cast<float>(lp)});
    }
    ipc::SendMessage(launcher_, ipc::Encode(t));
    FlushStep();  // the pass that chose this token (a request alone)
    if (opt_.probe_membw && index > 0) r.probe_gbs.push_back(ProbeReadGBs(probe_regions_));  // between steps
  };
  hooks.should_stop = [this] { return stop_(); };
  hooks.cancelled = [this, &r] {
    PollMessages();
    return r.cancel;
  };
  return hooks;
}

void ComputeService::Answer(const cp::Generate& g) {
  std::unique_ptr<Request> r = Prepare(g, false);
  if (const PrefixSnapshot* hit = StartFromCache(*r)) {  // a new sequence alone (--spec at max_batch 1)
    fwd_->CopyState(hit->state);
    seq_ids_ = r->p.prior;
  }
  active_ = {r.get()};
  // One Step per pass, sent after the Token the pass chose (or before the next pass).
  bool prefill_done = false;
  fwd_->SetPassObserver([&](int64_t rows, double seconds) {
    FlushStep();
    pending_step_ = MakeStep(1, rows, prefill_done ? 0 : rows, seconds, {g.request_id});
  });
  GreedyHooks hooks = HooksFor(*r);
  hooks.after_prefill = [&, inner = hooks.after_prefill](const float* logits) {
    inner(logits);
    prefill_done = true;
  };
  OfferCache(*r, hooks, [this]() -> const SequenceState* { return fwd_->torn() ? nullptr : &fwd_->state(); });
  const GreedyResult res = RunGreedy(*fwd_, cfg_.vocab_size, r->p, hooks);
  fwd_->SetPassObserver(nullptr);
  FlushStep();
  active_.clear();
  interrupted_ = res.ending == Ending::kInterrupted;
  seq_ids_.resize(r->kept);
  seq_ids_.insert(seq_ids_.end(), res.full.begin(), res.full.end());
  OfferEnd(*r, seq_ids_, fwd_->state(), fwd_->torn());
  Finish(*r, res);
}

SequenceState ComputeService::InitSequence(Request& r) {
  SequenceState s = fwd_->TakeState();
  seq_ids_.clear();
  if (const PrefixSnapshot* hit = StartFromCache(r))
    s = hit->state;  // copied into this sequence's buffers; the snapshot stays for the next request
  else
    s.Reset(cfg_);
  return s;
}

void ComputeService::Admit(const cp::Generate& g) {
  std::unique_ptr<Request> r = Prepare(g, true);
  SequenceState state = InitSequence(*r);  // before the hooks and the sequence: it sets r's feed
  GreedyHooks hooks = HooksFor(*r);
  Request& req = *r;
  OfferCache(req, hooks, [&req]() -> const SequenceState* { return &req.seq->state(); });
  r->seq = std::make_unique<BatchedSequence>(cfg_.vocab_size, r->p, std::move(hooks), std::move(state));
  active_.push_back(r.get());
  batch_.push_back(std::move(r));
}

// Admits held Generates while there is room (in arrival order: the first that cannot join a
// batch waits for it to drain, and so does everything after it), then runs steps.
void ComputeService::ServeBatch(const cp::Generate& first) {
  Admit(first);
  while (!batch_.empty()) {
    PollMessages();
    while (static_cast<int>(batch_.size()) < opt_.max_batch && !held_.empty() && !interrupted_) {
      const auto* g = std::get_if<cp::Generate>(&held_.front());
      if (!g || !Batchable(*g)) break;
      const cp::Generate next = *g;
      held_.pop_front();
      Admit(next);
    }
    BatchStep();
  }
}

// One pass: every decoding request's last token plus the next prompt chunk of the oldest
// request still prefilling; then each request's Tokens, one Step, and the Done of those that
// ended (each ended sequence becomes the kept one, the last to end staying).
void ComputeService::BatchStep() {
  std::vector<Segment> segs;
  std::vector<Request*> in_pass;
  bool prefill_taken = false;
  int64_t rows = 0, prefill_rows = 0;
  for (const auto& r : batch_) {
    const bool prefilling = r->seq->prefilling();
    if (prefilling && prefill_taken) continue;
    prefill_taken = prefill_taken || prefilling;
    segs.push_back(r->seq->NextSegment());
    in_pass.push_back(r.get());
    rows += segs.back().T;
    if (prefilling) prefill_rows += segs.back().T;
  }
  const auto t0 = Clock::now();
  bool stopped = false;
  try {
    fwd_->RunBatch(segs);
  } catch (const StopAtSafePoint&) {
    stopped = true;
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  if (stopped) {
    for (Request* r : in_pass) r->seq->Interrupt(true);
  } else {
    for (Request* r : in_pass) r->seq->AfterPass(seconds);
    std::vector<uint64_t> ids;
    for (Request* r : in_pass) ids.push_back(r->g.request_id);
    ipc::SendMessage(launcher_, ipc::Encode(MakeStep(static_cast<int32_t>(segs.size()), rows, prefill_rows, seconds,
                                                     std::move(ids))));
  }
  bool interrupted = stopped;
  for (const auto& r : batch_) interrupted = interrupted || (r->seq->ended() && r->seq->ending() == Ending::kInterrupted);
  if (interrupted) {  // a stop ends every request (the process then exits)
    interrupted_ = true;
    for (const auto& r : batch_) r->seq->Interrupt(false);
  }
  for (size_t i = 0; i < batch_.size();) {
    Request& r = *batch_[i];
    if (!r.seq->ended()) {
      ++i;
      continue;
    }
    const GreedyResult res = r.seq->Result();
    seq_ids_ = r.p.prior;  // a prefix snapshot's ids, if it started from one
    seq_ids_.insert(seq_ids_.end(), res.full.begin(), res.full.end());
    OfferEnd(r, seq_ids_, r.seq->state(), r.seq->torn());  // from this sequence's own state
    fwd_->LoadState(std::move(r.seq->state()), r.seq->torn());
    Finish(r, res);
    active_.erase(std::find(active_.begin(), active_.end(), &r));
    batch_.erase(batch_.begin() + static_cast<std::ptrdiff_t>(i));
  }
}

void ComputeService::Finish(Request& r, const GreedyResult& res) {
  const cp::Generate& g = r.g;
  const PipelineCounters& at_start = r.at_start;
  const PipelineCounters& at_prefill = r.at_prefill;
  // Stats first, then Done (the launcher's report waits for both; docs/pipeline.md).
  const PipelineCounters& c = counters_;
  ctl_.Stats({S("trunk_wait_seconds", c.trunk_wait_seconds),
              S("expert_wait_seconds", c.expert_wait_seconds),
              S("run_trunk_wait_seconds", c.trunk_wait_seconds - at_start.trunk_wait_seconds),
              S("run_expert_wait_seconds", c.expert_wait_seconds - at_start.expert_wait_seconds),
              S("decode_trunk_wait_seconds", c.trunk_wait_seconds - at_prefill.trunk_wait_seconds),
              S("decode_expert_wait_seconds", c.expert_wait_seconds - at_prefill.expert_wait_seconds),
              S("decode_steps", static_cast<double>(res.token_seconds.size())),
              S("trunk_streamed_bytes", static_cast<double>(c.trunk_streamed_bytes)),
              S("layer_wants", static_cast<double>(c.layer_wants)),
              S("expert_requests", static_cast<double>(c.expert_requests)),
              S("expert_rerequests", static_cast<double>(c.expert_rerequests)),
              S("stale_refs", static_cast<double>(c.stale_refs)),
              S("hints_sent", static_cast<double>(c.hints_sent)),
              S("hint_recall", fwd_->hint_stats().recall()),
              S("rejected_messages", static_cast<double>(c.rejects.rejected + ctl_.rejects().rejected)),
              S("median_step_seconds", Median(res.token_seconds)),
              S("membw_probe_passes", static_cast<double>(r.probe_gbs.size())),
              S("membw_probe_median_gbs", Median(r.probe_gbs)),
              S("spec_drafted", static_cast<double>(res.spec_drafted)),
              S("spec_accepted", static_cast<double>(res.spec_accepted))});
  cp::Done d;
  d.request_id = g.request_id;
  d.reason = WireReason(res.ending);
  d.stats.prompt_tokens = static_cast<int32_t>(g.ids.size());
  d.stats.generated_tokens = static_cast<int32_t>(res.generated.size());
  d.stats.prefill_seconds = res.prefill_seconds;
  d.stats.seconds_per_token = res.seconds_per_token;
  d.stats.position = static_cast<int32_t>(seq_ids_.size());
  d.stats.scored_tokens = static_cast<int32_t>(r.scorer.scored);
  d.stats.nll_sum = r.scorer.nll_sum;
  d.stats.spec_drafted = static_cast<int32_t>(res.spec_drafted);
  d.stats.spec_accepted = static_cast<int32_t>(res.spec_accepted);
  d.stats.cached_tokens = static_cast<int32_t>(r.cached);
  ipc::SendMessage(launcher_, ipc::Encode(d));
  const char* how = res.ending == Ending::kStopId        ? "stop id"
                    : res.ending == Ending::kInterrupted ? "interrupted"
                    : res.ending == Ending::kCancelled   ? "cancel"
                                                         : "length";
  std::fprintf(stderr,
               "[compute] stats: %zu tokens generated (ended by %s), prefill %.2f s, %.4f s/token, "
               "waits trunk %.2f s expert %.2f s, %llu rejected messages; %zu prompt ids from the prefix cache "
               "(%zu snapshots, %s)\n",
               res.generated.size(), how, res.prefill_seconds, res.seconds_per_token,
               c.trunk_wait_seconds - at_start.trunk_wait_seconds, c.expert_wait_seconds - at_start.expert_wait_seconds,
               static_cast<unsigned long long>(c.rejects.rejected + ctl_.rejects().rejected), r.cached,
               prefix_cache_.size(), k3::FormatBytes(prefix_cache_.bytes()).c_str());
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
