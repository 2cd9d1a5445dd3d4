#include "scheduler.h"

#include <algorithm>
#include <cstdio>
#include <fstream>

#include "batch_sequence.h"
#include "prefix_store_rules.h"
#include "saved_state.h"
#include "common/error.h"
#include "common/user_file.h"
#include "common/format_bytes.h"
#include "common/median.h"
#include "common/plan/memory_plan.h"

namespace k3::compute {

namespace cp = ipc::compute;

namespace {
ipc::control::Stat S(const char* name, double v) { return {name, v}; }

// The stats line's account of the prefix store: ids of this request read from it, entries written so far.
std::string StoreNote(size_t stored, const PrefixStore* store) {
  if (!store || !store->on()) return "";
  return ", " + std::to_string(stored) + " of them from the prefix store (" + std::to_string(store->written()) +
         " snapshots written by this process)";
}
}  // namespace

// What one request carries besides its sequence: the Generate, what its hooks keep, the
// counters at its start; batched requests also their sequence (batch_sequence.h).
struct Scheduler::Request {
  cp::Generate g;
  std::vector<int32_t> feed;  // the ids this request feeds (a kept state's unconsumed ones first)
  size_t kept = 0;            // ids of a kept sequence (or a prefix snapshot) before feed
  size_t cached = 0;          // of them, from a prefix snapshot (RunStats.cached_tokens)
  size_t stored = 0;          // of those, read from the prefix store
  std::vector<int32_t> whole;  // p.prior + p.ids: the sequence once the prompt is consumed (snapshot keys)
  GreedyParams p;
  PromptScorer scorer;
  Logprobs chosen_lp;  // of the token on_token sends next (--logprobs)
  std::vector<double> probe_gbs;
  PipelineCounters at_start, at_prefill;
  bool cancel = false;  // a Cancel for it arrived
  std::unique_ptr<BatchedSequence> seq;
  // Its own prefill clock and progress rate limit: requests prefilled in one batch each report.
  Clock::time_point started{}, last_progress{};
};

Scheduler::Scheduler(const ModelConfig& cfg, Forward& fwd, const PipelineCounters& counters, SchedulerPort& port,
                     SchedulerOptions opt)
    : cfg_(cfg), fwd_(fwd), counters_(counters), port_(port), opt_(std::move(opt)),
      prefix_cache_(opt_.prefix_cache_bytes), constraints_(opt_.tokenizer_dir, cfg_.vocab_size) {
  if (!opt_.prefix_store_dir.empty()) {
    identity_ = opt_.identify();
    store_ = std::make_unique<PrefixStore>(opt_.prefix_store_dir, opt_.prefix_store_bytes, cfg_, *identity_);
  }
}

Scheduler::~Scheduler() = default;

void Scheduler::Drain() {
  while (!interrupted_) {
    std::optional<cp::Message> msg;
    if (!held_.empty()) {
      msg = std::move(held_.front());
      held_.pop_front();
    } else {
      msg = port_.Receive();
    }
    if (!msg) break;
    Handle(*msg);
  }
}

void Scheduler::Handle(const cp::Message& m) {
  // A Cancel between requests names a request that has already ended: nothing to do.
  if (const auto* g = std::get_if<cp::Generate>(&m)) {
    if (Batchable(*g, opt_.max_batch)) ServeBatch(*g);
    else Answer(*g);
  } else if (const auto* op = std::get_if<cp::StateOp>(&m)) {
    AnswerState(*op);
  } else if (const auto* ping = std::get_if<cp::Ping>(&m)) {
    port_.Send(cp::Pong{ping->nonce});  // idle: at once
  }
}

void Scheduler::StartFromSnapshot(Request& r, SequenceState& into) {
  const cp::Generate& g = r.g;
  const bool from_cache = StartsFromCache(g, prefix_cache_.capacity());
  const bool from_store = StartsFromStore(g, store_ && store_->on());
  const PrefixSnapshot* hit = from_cache ? prefix_cache_.Lookup(g.ids, g.cache_partition) : nullptr;
  const int64_t in_cache = hit ? static_cast<int64_t>(hit->ids.size()) : 0;
  // The cache sits in front: the store is read only for a longer prefix than the cache holds.
  const int64_t in_store = from_store ? store_->Restore(g.ids, in_cache, into) : 0;
  size_t n = 0;
  if (in_store > 0) {
    n = r.stored = static_cast<size_t>(in_store);
  } else if (hit) {
    into = hit->state;  // copied into this sequence's buffers; the snapshot stays for the next request
    n = hit->ids.size();
  } else {
    if (!from_store) into.Reset(cfg_);  // Restore leaves it fresh
    return;
  }
  r.cached = r.kept = n;
  r.feed.assign(g.ids.begin() + static_cast<std::ptrdiff_t>(n), g.ids.end());
  r.p.ids = r.feed;
  // The sampler sees them as the sequence's first ids: a fresh run's draws.
  r.p.prior.assign(g.ids.begin(), g.ids.begin() + static_cast<std::ptrdiff_t>(n));
  r.scorer = PromptScorer{r.feed};
}

void Scheduler::OfferCache(Request& r, GreedyHooks& hooks, std::function<const SequenceState*()> state) {
  const cp::Generate& g = r.g;
  const auto feed = static_cast<int64_t>(r.feed.size());
  const bool to_cache = OffersPrompt(g, prefix_cache_.capacity(), r.feed.size());
  const bool cache_prompt =
      to_cache && prefix_cache_.Fits(plan::PrefixSnapshotBytes(cfg_, static_cast<int64_t>(g.ids.size()) - 1));
  const bool to_store = OffersStore(g, store_ && store_->on());
  if (!cache_prompt && !to_store) return;
  // Generate.snapshot_at counts in g.ids; the feed starts with the kept ids not consumed yet
  // (keep_state), or after the ids a snapshot held.
  const int64_t also = g.snapshot_at > 0 && (to_cache || to_store)
                           ? g.snapshot_at + feed - static_cast<int64_t>(g.ids.size()) : 0;
  r.p.marks = store::SnapshotMarks(feed, r.p.prefill_chunk, to_store ? opt_.prefix_store_interval : 0, also,
                                   true);
  r.whole = r.p.prior;
  r.whole.insert(r.whole.end(), r.feed.begin(), r.feed.end());
  hooks.at_mark = [this, &r, state = std::move(state), to_cache, to_store, also, feed](int64_t mark) {
    const SequenceState* s = state();
    const size_t n = r.p.prior.size() + static_cast<size_t>(mark);
    if (!s || s->position != static_cast<int64_t>(n)) return;
    const std::span<const int32_t> consumed(r.whole.data(), n);
    if (to_cache && (mark == feed - 1 || mark == also)) OfferToCache(consumed, r.g.cache_partition, *s);
    if (to_store && store_->Wants(consumed)) store_->Put(consumed, *s);
  };
}

// The whole sequence as far as it was consumed (all but the last generated id, never fed): the
// next turn of a chat sends it back with its new message. Not after a stop (half-updated, or the
// process ends).
void Scheduler::OfferEnd(const Request& r, const std::vector<int32_t>& ids, const SequenceState& state, bool torn) {
  if (ids.size() < static_cast<size_t>(state.position)) return;
  const std::span<const int32_t> consumed(ids.data(), static_cast<size_t>(state.position));
  // The store keeps a turn's end for the next process too (the next turn sends this sequence back).
  if (StoresEnd(r.g, store_ && store_->on(), torn, interrupted_) && store_->Wants(consumed)) store_->Put(consumed, state);
  if (!OffersEnd(r.g, prefix_cache_.capacity(), torn, interrupted_)) return;
  OfferToCache(consumed, r.g.cache_partition, state);
}

void Scheduler::OfferToCache(std::span<const int32_t> consumed, uint64_t partition, const SequenceState& state) {
  if (static_cast<int64_t>(consumed.size()) != state.position) return;
  if (!prefix_cache_.Fits(PrefixCache::BytesOf(consumed.size(), state))) return;
  prefix_cache_.Insert(consumed, partition, state);
}

// Between passes, without waiting: a Cancel marks the running request it names (any other
// is ignored: that request has ended, or not started), a Ping is answered; any other message (a next Generate,
// say) is kept in held_ and answered, in order, when there is room for it.
void Scheduler::PollMessages() {
  while (auto m = port_.Receive()) {
    if (const auto* c = std::get_if<cp::Cancel>(&*m)) {
      for (Request* r : active_)
        if (r->g.request_id == c->request_id) r->cancel = true;
    } else if (const auto* ping = std::get_if<cp::Ping>(&*m)) {
      port_.Send(cp::Pong{ping->nonce});  // between passes: the loop is alive (docs/server.md "Compute liveness")
    } else {
      held_.push_back(std::move(*m));
    }
  }
}

cp::Step Scheduler::MakeStep(int32_t sequences, int64_t rows, int64_t prefill_rows, double seconds,
                             std::vector<uint64_t> ids) const {
  cp::Step st;
  st.sequences = sequences;
  st.rows = static_cast<int32_t>(rows);
  st.prefill_rows = static_cast<int32_t>(prefill_rows);
  st.seconds = seconds;
  st.trunk_bytes = opt_.trunk_bytes_pass;
  const std::vector<int64_t>& e = fwd_.pass_experts();
  for (size_t l = 0; l < e.size() && l < opt_.expert_bytes.size(); ++l) {
    st.experts += static_cast<int32_t>(e[l]);
    st.expert_bytes += e[l] * opt_.expert_bytes[l];
  }
  st.request_ids = std::move(ids);
  return st;
}

void Scheduler::FlushStep() {
  if (!pending_step_) return;
  port_.Send(std::move(*pending_step_));
  pending_step_.reset();
}

// Control Stats for the launcher's live progress line: after each prompt chunk of a request,
// at most every 0.25 s, and always for the last one; with the request's id and the seconds
// since its prefill began, so each request's line has its own rate.
void Scheduler::PrefillProgress(Request& r, int64_t done, int64_t total) {
  const auto now = Clock::now();
  if (done < total && now - r.last_progress < std::chrono::milliseconds(250)) return;
  r.last_progress = now;
  port_.Send(StatsOut{{S("prefill_tokens_done", static_cast<double>(done)),
                       S("prefill_tokens_total", static_cast<double>(total)),
                       S("prefill_seconds", std::chrono::duration<double>(now - r.started).count()),
                       S("prefill_request", static_cast<double>(r.g.request_id))}});
}

void Scheduler::AnswerState(const cp::StateOp& op) {
  cp::StateDone d;
  d.request_id = op.request_id;
  try {
    if (!identity_) identity_ = opt_.identify();
    if (op.action == cp::StateAction::kSave) {
      if (fwd_.torn()) throw BadInput("the sequence was stopped in the middle of a pass: nothing to save");
      SaveSequence(op.path, cfg_, *identity_, fwd_.state(), seq_ids_, op.extra);
    } else if (op.action == cp::StateAction::kLoad) {
      SavedSequence s = LoadSequence(op.path, cfg_, *identity_, 0);  // the launcher checked the context
      fwd_.LoadState(std::move(s.state));
      seq_ids_ = std::move(s.ids);
      d.extra = std::move(s.extra);
    } else {
      fwd_.Reset();
      seq_ids_.clear();
    }
    d.ok = true;
  } catch (const std::exception& e) {  // a refused file leaves the state as it was
    d.error = e.what();
  }
  d.position = static_cast<int32_t>(seq_ids_.size());
  d.ids = seq_ids_;
  port_.Send(std::move(d));
}

std::unique_ptr<Scheduler::Request> Scheduler::Prepare(const cp::Generate& g, bool batched) {
  const KeptSequence kept{seq_ids_.size(), static_cast<size_t>(fwd_.position()), fwd_.torn()};
  if (const std::string bad = RequestProblem(g, cfg_.vocab_size, kept); !bad.empty()) throw BadInput(bad);
  auto r = std::make_unique<Request>();
  r->g = g;
  // keep_state: the ids not consumed yet (the last generated one, say) go first, then the prompt.
  r->kept = KeptIds(g, kept);
  if (g.keep_state) r->feed.assign(seq_ids_.begin() + static_cast<std::ptrdiff_t>(r->kept), seq_ids_.end());
  r->feed.insert(r->feed.end(), g.ids.begin(), g.ids.end());
  if (!batched) {  // checked: now the kept sequence may change
    if (g.keep_state && g.full_recompute) fwd_.Reset();
    if (!g.keep_state) {
      fwd_.Reset();
      seq_ids_.clear();
    }
  }
  r->at_start = r->at_prefill = counters_;  // waits before this request (start-up) excluded below
  GreedyParams& p = r->p;
  p.ids = r->feed;
  p.prior.assign(seq_ids_.begin(), seq_ids_.begin() + static_cast<std::ptrdiff_t>(r->kept));
  p.gen = std::max(0, g.gen);
  p.full_recompute = g.full_recompute;
  // The planned chunk (--prefill-chunk) bounds the scratch: a request may ask for less.
  p.prefill_chunk = g.prefill_chunk > 0 ? std::min<int64_t>(g.prefill_chunk, opt_.prefill_chunk) : opt_.prefill_chunk;
  p.stop_ids = g.stop_ids;
  p.max_positions = std::max(0, g.max_positions);
  p.sampling = g.sampling;
  p.all_positions = g.perplexity;
  p.spec = batched ? 0 : g.spec;
  if (g.constraint)  // the sampler chooses among the ids the schema allows next
    p.choose = ConstrainedChooser(constraints_.For(*g.constraint), cfg_.vocab_size, p.sampling, p.prior.size() + p.ids.size());
  r->scorer = PromptScorer{r->feed};  // the ids this pass feeds (a kept state's last id first)
  return r;
}

GreedyHooks Scheduler::HooksFor(Request& r) {
  GreedyHooks hooks;
  const cp::Generate& g = r.g;
  if (g.perplexity)
    hooks.on_prompt_chunk = [this, &r](const float* chunk, int64_t T) { r.scorer.Chunk(chunk, T, cfg_.vocab_size); };
  if (g.logprobs >= 0)
    hooks.on_chosen = [this, &r](const float* logits, int32_t id, int64_t) {
      r.chosen_lp = TokenLogprobs(logits, cfg_.vocab_size, id, r.g.logprobs);
    };
  r.started = Clock::now();
  r.last_progress = {};
  hooks.on_prefill_progress = [this, &r](int64_t done, int64_t total) { PrefillProgress(r, done, total); };
  // Waits of the decode steps alone (the prompt pass also waits for start-up reads), so the
  // launcher can show I/O wait per generated token.
  hooks.after_prefill = [this, &r](const float* logits) {
    r.at_prefill = counters_;
    if (opt_.dump_logits.empty()) return;
    WriteFileAtomically(opt_.dump_logits,
                        {reinterpret_cast<const char*>(logits), static_cast<size_t>(cfg_.vocab_size) * 4},
                        "--dump-logits", kExitOutput);
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
    port_.Send(std::move(t));
    FlushStep();  // the pass that chose this token (a request alone)
    if (opt_.probe_membw && index > 0) r.probe_gbs.push_back(ProbeReadGBs(opt_.probe_regions));  // between steps
  };
  hooks.should_stop = [this] { return port_.StopRequested(); };
  hooks.cancelled = [this, &r] {
    PollMessages();
    return r.cancel;
  };
  return hooks;
}

void Scheduler::Answer(const cp::Generate& g) {
  std::unique_ptr<Request> r = Prepare(g, false);
  if (StartsFromCache(g, prefix_cache_.capacity()) || StartsFromStore(g, store_ && store_->on())) {
    SequenceState s = fwd_.TakeState();  // a new sequence alone (--spec at max_batch 1): its buffers
    StartFromSnapshot(*r, s);
    fwd_.LoadState(std::move(s));
    seq_ids_ = r->p.prior;
  }
  active_ = {r.get()};
  // One Step per pass, sent after the Token the pass chose (or before the next pass).
  bool prefill_done = false;
  fwd_.SetPassObserver([&](int64_t rows, double seconds) {
    FlushStep();
    pending_step_ = MakeStep(1, rows, prefill_done ? 0 : rows, seconds, {g.request_id});
  });
  GreedyHooks hooks = HooksFor(*r);
  hooks.after_prefill = [&, inner = hooks.after_prefill](const float* logits) {
    inner(logits);
    prefill_done = true;
  };
  OfferCache(*r, hooks, [this]() -> const SequenceState* { return fwd_.torn() ? nullptr : &fwd_.state(); });
  const GreedyResult res = RunGreedy(fwd_, cfg_.vocab_size, r->p, hooks);
  fwd_.SetPassObserver(nullptr);
  FlushStep();
  active_.clear();
  interrupted_ = res.ending == Ending::kInterrupted;
  seq_ids_.resize(r->kept);
  seq_ids_.insert(seq_ids_.end(), res.full.begin(), res.full.end());
  OfferEnd(*r, seq_ids_, fwd_.state(), fwd_.torn());
  Finish(*r, res);
}

SequenceState Scheduler::InitSequence(Request& r) {
  SequenceState s = fwd_.TakeState();
  seq_ids_.clear();
  StartFromSnapshot(r, s);
  return s;
}

void Scheduler::Admit(const cp::Generate& g) {
  std::unique_ptr<Request> r = Prepare(g, true);
  SequenceState state = InitSequence(*r);  // before the hooks and the sequence: it sets r's feed
  GreedyHooks hooks = HooksFor(*r);
  Request& req = *r;
  OfferCache(req, hooks, [&req]() -> const SequenceState* { return &req.seq->state(); });
  r->seq = std::make_unique<BatchedSequence>(cfg_.vocab_size, r->p, std::move(hooks), std::move(state));
  active_.push_back(r.get());
  batch_.push_back(std::move(r));
}

// Admits held Generates while they may join (JoinsBatch), then runs steps until it drains.
void Scheduler::ServeBatch(const cp::Generate& first) {
  Admit(first);
  while (!batch_.empty()) {
    PollMessages();
    while (!held_.empty() && JoinsBatch(held_.front(), batch_.size(), opt_.max_batch, interrupted_)) {
      const cp::Generate next = std::get<cp::Generate>(held_.front());
      held_.pop_front();
      Admit(next);
    }
    BatchStep();
  }
}

// One pass (PassMembers: every decoding request's last token plus the next prompt chunk of
// the oldest request still prefilling); then each request's Tokens, one Step, and the Done of
// those that ended (each ended sequence becomes the kept one, the last to end staying).
void Scheduler::BatchStep() {
  std::vector<bool> prefilling;
  for (const auto& r : batch_) prefilling.push_back(r->seq->prefilling());
  std::vector<Segment> segs;
  std::vector<Request*> in_pass;
  int64_t rows = 0, prefill_rows = 0;
  for (size_t i : PassMembers(prefilling)) {
    Request* r = batch_[i].get();
    segs.push_back(r->seq->NextSegment());
    in_pass.push_back(r);
    rows += segs.back().T;
    if (prefilling[i]) prefill_rows += segs.back().T;
  }
  const auto t0 = Clock::now();
  bool stopped = false;
  try {
    fwd_.RunBatch(segs);
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
    port_.Send(MakeStep(static_cast<int32_t>(segs.size()), rows, prefill_rows, seconds, std::move(ids)));
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
    fwd_.LoadState(std::move(r.seq->state()), r.seq->torn());
    Finish(r, res);
    active_.erase(std::find(active_.begin(), active_.end(), &r));
    batch_.erase(batch_.begin() + static_cast<std::ptrdiff_t>(i));
  }
}

void Scheduler::Finish(Request& r, const GreedyResult& res) {
  const cp::Generate& g = r.g;
  const PipelineCounters& at_start = r.at_start;
  const PipelineCounters& at_prefill = r.at_prefill;
  // Stats first, then Done (the launcher's report waits for both; docs/pipeline.md).
  const PipelineCounters& c = counters_;
  const uint64_t rejected = c.rejects.rejected + port_.ControlRejects();
  port_.Send(StatsOut{{S("trunk_wait_seconds", c.trunk_wait_seconds),
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
                       S("hint_recall", fwd_.hint_stats().recall()),
                       S("rejected_messages", static_cast<double>(rejected)),
                       S("median_step_seconds", Median(res.token_seconds)),
                       S("membw_probe_passes", static_cast<double>(r.probe_gbs.size())),
                       S("membw_probe_median_gbs", Median(r.probe_gbs)),
                       S("spec_drafted", static_cast<double>(res.spec_drafted)),
                       S("spec_accepted", static_cast<double>(res.spec_accepted))}});
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
  port_.Send(std::move(d));
  const char* how = res.ending == Ending::kStopId        ? "stop id"
                    : res.ending == Ending::kInterrupted ? "interrupted"
                    : res.ending == Ending::kCancelled   ? "cancel"
                                                         : "length";
  std::fprintf(stderr,
               "[compute] stats: %zu tokens generated (ended by %s), prefill %.2f s, %.4f s/token, "
               "waits trunk %.2f s expert %.2f s, %llu rejected messages; %zu prompt ids from the prefix cache "
               "(%zu snapshots, %s)%s\n",
               res.generated.size(), how, res.prefill_seconds, res.seconds_per_token,
               c.trunk_wait_seconds - at_start.trunk_wait_seconds, c.expert_wait_seconds - at_start.expert_wait_seconds,
               static_cast<unsigned long long>(rejected), r.cached, prefix_cache_.size(),
               k3::FormatBytes(prefix_cache_.bytes()).c_str(), StoreNote(r.stored, store_.get()).c_str());
}

}  // namespace k3::compute
