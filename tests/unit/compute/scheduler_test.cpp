// compute's scheduler core (services/compute/scheduler.h), driven in-process with the real
// Forward on the tiny checkpoint: no sockets, no processes. A test port plays the launcher:
// it queues the messages the core receives and records what it sends, in order. The
// reference ids come from RunGreedy on a Forward of its own (each request alone).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <unistd.h>

#include "common/error.h"
#include "forward.h"
#include "generate.h"
#include "scheduler.h"
#include "scheduler_rules.h"
#include "tiny_checkpoint.h"

namespace k3::compute {
namespace {

namespace cp = ipc::compute;

cp::Generate Gen(uint64_t id, std::vector<int32_t> ids, int32_t gen) {
  cp::Generate g;
  g.request_id = id;
  g.ids = std::move(ids);
  g.gen = gen;
  return g;
}

// ---------------------------------------------------------------- the rules alone

TEST(SchedulerRules, RequestProblemNamesTheFirstBrokenRule) {
  const int64_t vocab = 1000;
  EXPECT_EQ(RequestProblem(Gen(1, {1, 2, 3}, 4), vocab, {}), "");
  EXPECT_EQ(RequestProblem(Gen(1, {1, 1000, -1}, 4), vocab, {}), "prompt id 1000 outside the vocabulary");
  EXPECT_EQ(RequestProblem(Gen(1, {}, 4), vocab, {}), "Generate without prompt ids");
  cp::Generate spec = Gen(1, {1}, 4);
  spec.spec = 17;
  EXPECT_EQ(RequestProblem(spec, vocab, {}), "Generate.spec 17 outside [0, 16]");
  spec.spec = -1;
  EXPECT_EQ(RequestProblem(spec, vocab, {}), "Generate.spec -1 outside [0, 16]");
  cp::Generate sampling = Gen(1, {1}, 4);
  sampling.sampling.temperature = -1;
  EXPECT_EQ(RequestProblem(sampling, vocab, {}).rfind("Generate: ", 0), 0u) << RequestProblem(sampling, vocab, {});

  // keep_state: the kept sequence's unconsumed ids are fed first, and count for max_positions.
  cp::Generate keep = Gen(1, {}, 4);
  keep.keep_state = true;
  EXPECT_EQ(RequestProblem(keep, vocab, {.ids = 5, .consumed = 4}), "");  // its last generated id
  EXPECT_EQ(RequestProblem(keep, vocab, {.ids = 5, .consumed = 5}), "Generate without prompt ids");
  EXPECT_EQ(RequestProblem(keep, vocab, {.ids = 5, .consumed = 4, .torn = true}),
            "Generate keep_state after a pass that was stopped midway");
  keep.ids = {7, 8};
  keep.max_positions = 6;
  EXPECT_EQ(RequestProblem(keep, vocab, {.ids = 5, .consumed = 4}),
            "Generate: a sequence of 7 tokens does not fit max_positions 6");
  keep.keep_state = false;  // a new sequence: only its own ids
  EXPECT_EQ(RequestProblem(keep, vocab, {.ids = 5, .consumed = 4, .torn = true}), "");
  EXPECT_EQ(KeptIds(keep, {.ids = 5, .consumed = 4}), 0u);
  keep.keep_state = true;
  EXPECT_EQ(KeptIds(keep, {.ids = 5, .consumed = 4}), 4u);
  keep.full_recompute = true;  // feeds everything again
  EXPECT_EQ(KeptIds(keep, {.ids = 5, .consumed = 4}), 0u);
}

TEST(SchedulerRules, WhoJoinsTheBatch) {
  const cp::Message plain = Gen(1, {1}, 2);
  EXPECT_TRUE(JoinsBatch(plain, 1, 2, false));
  EXPECT_FALSE(JoinsBatch(plain, 2, 2, false));  // full
  EXPECT_FALSE(JoinsBatch(plain, 1, 2, true));   // a stop
  cp::Generate keep = Gen(1, {1}, 2);
  keep.keep_state = true;
  EXPECT_FALSE(JoinsBatch(keep, 0, 4, false));
  cp::Generate full = Gen(1, {1}, 2);
  full.full_recompute = true;
  EXPECT_FALSE(JoinsBatch(full, 0, 4, false));
  cp::Generate spec = Gen(1, {1}, 2);
  spec.spec = 3;
  EXPECT_FALSE(Batchable(spec, 1));  // --spec alone at max_batch 1
  EXPECT_TRUE(Batchable(spec, 2));   // ignored in a batch (the same ids)
  EXPECT_FALSE(JoinsBatch(cp::Message{cp::Cancel{1}}, 0, 4, false));
  cp::StateOp op;
  EXPECT_FALSE(JoinsBatch(cp::Message{op}, 0, 4, false));
}

TEST(SchedulerRules, APassTakesEveryDecoderAndOnlyTheOldestPrefill) {
  EXPECT_EQ(PassMembers({true, false, true, false}), (std::vector<size_t>{0, 1, 3}));
  EXPECT_EQ(PassMembers({false, true, true}), (std::vector<size_t>{0, 1}));
  EXPECT_EQ(PassMembers({false, false}), (std::vector<size_t>{0, 1}));
  EXPECT_EQ(PassMembers({}), (std::vector<size_t>{}));
}

TEST(SchedulerRules, PrefixCacheUse) {
  cp::Generate g = Gen(1, {1, 2, 3}, 2);
  EXPECT_TRUE(StartsFromCache(g, 1 << 20));
  EXPECT_FALSE(StartsFromCache(g, 0));
  EXPECT_TRUE(OffersPrompt(g, 1 << 20, 2));
  EXPECT_FALSE(OffersPrompt(g, 1 << 20, 1));  // nothing before the last id to keep
  EXPECT_TRUE(OffersEnd(g, 1 << 20, false, false));
  EXPECT_FALSE(OffersEnd(g, 1 << 20, true, false));   // torn
  EXPECT_FALSE(OffersEnd(g, 1 << 20, false, true));   // the process stops
  g.perplexity = true;  // scores every prompt id: prefills from scratch, but may offer
  EXPECT_FALSE(StartsFromCache(g, 1 << 20));
  EXPECT_TRUE(OffersPrompt(g, 1 << 20, 3));
  g.perplexity = false;
  g.keep_state = true;
  EXPECT_FALSE(StartsFromCache(g, 1 << 20));
  EXPECT_FALSE(OffersPrompt(g, 1 << 20, 3));
  EXPECT_FALSE(OffersEnd(g, 1 << 20, false, false));
  EXPECT_EQ(WireReason(Ending::kLength), cp::StopReason::kLength);
  EXPECT_EQ(WireReason(Ending::kStopId), cp::StopReason::kStopId);
  EXPECT_EQ(WireReason(Ending::kInterrupted), cp::StopReason::kInterrupted);
  EXPECT_EQ(WireReason(Ending::kCancelled), cp::StopReason::kCancelled);
}

// The prefix store is one directory keyed by ids alone: only the shared partition uses it, so a
// request with a cache_salt neither starts from another's stored prefix nor leaves one there.
TEST(SchedulerRules, PrefixStoreServesTheSharedPartitionOnly) {
  cp::Generate g = Gen(1, {1, 2, 3}, 2);
  EXPECT_TRUE(StartsFromStore(g, true));
  EXPECT_TRUE(OffersStore(g, true));
  EXPECT_FALSE(StartsFromStore(g, false));
  g.cache_partition = 0x9e3779b97f4a7c15ull;
  EXPECT_FALSE(StartsFromStore(g, true));
  EXPECT_FALSE(OffersStore(g, true));
  EXPECT_FALSE(StoresEnd(g, true, false, false));
  EXPECT_TRUE(StartsFromCache(g, 1 << 20));  // the in-memory cache keeps partitions apart itself
}

// A sequence's end goes to the store as its prompt does, a chat turn's (keep_state) included,
// but never a torn or stopped one, nor a full recompute's.
TEST(SchedulerRules, PrefixStoreKeepsTheEndOfATurn) {
  cp::Generate g = Gen(1, {1, 2, 3}, 2);
  EXPECT_TRUE(StoresEnd(g, true, false, false));
  EXPECT_FALSE(StoresEnd(g, false, false, false));  // no store
  EXPECT_FALSE(StoresEnd(g, true, true, false));    // torn
  EXPECT_FALSE(StoresEnd(g, true, false, true));    // the process stops
  g.keep_state = true;                              // a chat turn: its end is what the next turn continues
  EXPECT_TRUE(StoresEnd(g, true, false, false));
  g.full_recompute = true;
  EXPECT_FALSE(StoresEnd(g, true, false, false));
}

// ---------------------------------------------------------------- the core on the tiny model

// The launcher, in-process: `inbox` is what arrives, `sent` what the core sent, and
// `on_send` may add arrivals as it watches (a Cancel after some token, say).
class TestPort : public SchedulerPort {
 public:
  std::optional<cp::Message> Receive() override {
    if (inbox.empty()) return std::nullopt;
    cp::Message m = std::move(inbox.front());
    inbox.pop_front();
    return m;
  }
  void Send(Outgoing m) override {
    sent.push_back(std::move(m));
    if (on_send) on_send(sent.back());
  }
  bool StopRequested() override { return stop; }
  uint64_t ControlRejects() const override { return 0; }

  std::vector<int32_t> Tokens(uint64_t request) const {
    std::vector<int32_t> ids;
    for (const Outgoing& m : sent)
      if (const auto* t = std::get_if<cp::Token>(&m); t && t->request_id == request) {
        EXPECT_EQ(t->index, static_cast<int32_t>(ids.size()));
        ids.push_back(t->id);
      }
    return ids;
  }
  std::vector<cp::Done> Dones() const {
    std::vector<cp::Done> d;
    for (const Outgoing& m : sent)
      if (const auto* x = std::get_if<cp::Done>(&m)) d.push_back(*x);
    return d;
  }
  std::optional<cp::Done> DoneOf(uint64_t request) const {
    for (const cp::Done& d : Dones())
      if (d.request_id == request) return d;
    return std::nullopt;
  }
  std::vector<cp::Step> Steps() const {
    std::vector<cp::Step> s;
    for (const Outgoing& m : sent)
      if (const auto* x = std::get_if<cp::Step>(&m)) s.push_back(*x);
    return s;
  }
  // Where in `sent` the first message of `pred` is (sent.size() if none).
  size_t FirstIndex(const std::function<bool(const Outgoing&)>& pred) const {
    for (size_t i = 0; i < sent.size(); ++i)
      if (pred(sent[i])) return i;
    return sent.size();
  }

  std::deque<cp::Message> inbox;
  std::vector<Outgoing> sent;
  std::function<void(const Outgoing&)> on_send;
  bool stop = false;
};

class SchedulerTest : public TinyCheckpoint {
 protected:
  void SetUp() override {
    TinyCheckpoint::SetUp();
    if (HasFatalFailure()) return;
    fwd_ = std::make_unique<Forward>(cfg_, globals_, *layers_, *experts_);
    ref_ = std::make_unique<Forward>(cfg_, globals_, *layers_, *experts_);
  }

  // A core over fwd_ with these options.
  Scheduler& Core(int max_batch, int64_t prefix_cache_bytes = 0) {
    SchedulerOptions o;
    o.max_batch = max_batch;
    o.prefix_cache_bytes = prefix_cache_bytes;
    o.identify = [] { return state::IdentifyModel(TinyDir()); };
    core_ = std::make_unique<Scheduler>(cfg_, *fwd_, counters_, port_, std::move(o));
    return *core_;
  }

  // What the request generates alone, from a fresh sequence (RunGreedy, not the core).
  std::vector<int32_t> Solo(const cp::Generate& g) {
    ref_->Reset();
    GreedyParams p;
    p.ids = g.ids;
    p.gen = g.gen;
    p.stop_ids = g.stop_ids;
    return RunGreedy(*ref_, cfg_.vocab_size, p, {}).generated;
  }

  std::unique_ptr<Forward> fwd_, ref_;
  PipelineCounters counters_;
  TestPort port_;
  std::unique_ptr<Scheduler> core_;
};

bool IsDone(const Outgoing& m) { return std::holds_alternative<cp::Done>(m); }
bool StepHas(const Outgoing& m, uint64_t request) {
  const auto* s = std::get_if<cp::Step>(&m);
  return s && std::find(s->request_ids.begin(), s->request_ids.end(), request) != s->request_ids.end();
}

TEST_F(SchedulerTest, ARefusedGenerateThrowsItsReasonAndSendsNothing) {
  Scheduler& core = Core(2);
  port_.inbox.push_back(Gen(1, {1, static_cast<int32_t>(cfg_.vocab_size)}, 3));
  try {
    core.Drain();
    FAIL() << "accepted a prompt id outside the vocabulary";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), kExitBadInput);
    EXPECT_EQ(std::string(e.what()), "prompt id " + std::to_string(cfg_.vocab_size) + " outside the vocabulary");
  }
  EXPECT_TRUE(port_.sent.empty());
}

TEST_F(SchedulerTest, BatchesHoldAtMostMaxBatchAndGiveTheSoloIds) {
  Scheduler& core = Core(2);
  const std::vector<cp::Generate> gs = {Gen(1, {1, 5, 9, 200, 77}, 5), Gen(2, {3, 18, 42}, 7),
                                        Gen(3, {11, 300, 7, 2}, 4)};
  for (const auto& g : gs) port_.inbox.push_back(g);
  core.Drain();
  ASSERT_EQ(port_.Dones().size(), 3u);
  for (const auto& g : gs) {
    EXPECT_EQ(port_.Tokens(g.request_id), Solo(g)) << "request " << g.request_id;
    const auto d = port_.DoneOf(g.request_id);
    ASSERT_TRUE(d);
    EXPECT_EQ(d->reason, cp::StopReason::kLength);
    EXPECT_EQ(d->stats.generated_tokens, g.gen);
    EXPECT_EQ(d->stats.prompt_tokens, static_cast<int32_t>(g.ids.size()));
  }
  bool shared = false;
  for (const cp::Step& s : port_.Steps()) {
    EXPECT_LE(s.sequences, 2);
    EXPECT_EQ(s.request_ids.size(), static_cast<size_t>(s.sequences));
    shared = shared || s.sequences == 2;
  }
  EXPECT_TRUE(shared) << "requests 1 and 2 never shared a pass";
  // Request 3 waits for room: its first pass comes after the first Done.
  EXPECT_LT(port_.FirstIndex(IsDone), port_.FirstIndex([](const Outgoing& m) { return StepHas(m, 3); }));
  // Two prefills never share a pass: 1 and 2 are admitted together, 2's prompt waits for 1's.
  const size_t first_2 = port_.FirstIndex([](const Outgoing& m) { return StepHas(m, 2); });
  const auto steps = port_.Steps();
  ASSERT_FALSE(steps.empty());
  EXPECT_EQ(steps.front().request_ids, (std::vector<uint64_t>{1}));
  EXPECT_EQ(steps.front().prefill_rows, 5);
  ASSERT_LT(first_2, port_.sent.size());
  EXPECT_EQ(std::get<cp::Step>(port_.sent[first_2]).prefill_rows, 3);  // 2's prompt, with 1's token
  EXPECT_EQ(std::get<cp::Step>(port_.sent[first_2]).rows, 4);
  EXPECT_FALSE(core.interrupted());
}

TEST_F(SchedulerTest, ACancelMidBatchEndsThatRequestOnly) {
  Scheduler& core = Core(2);
  const cp::Generate a = Gen(1, {1, 5, 9, 200, 77}, 10), b = Gen(2, {3, 18, 42}, 10);
  port_.inbox = {a, b};
  port_.on_send = [this](const Outgoing& m) {
    if (const auto* t = std::get_if<cp::Token>(&m); t && t->request_id == 1 && t->index == 2)
      port_.inbox.push_back(cp::Cancel{1});
  };
  core.Drain();
  const auto da = port_.DoneOf(1), db = port_.DoneOf(2);
  ASSERT_TRUE(da && db);
  EXPECT_EQ(da->reason, cp::StopReason::kCancelled);
  EXPECT_EQ(db->reason, cp::StopReason::kLength);
  const std::vector<int32_t> ta = port_.Tokens(1), solo_a = Solo(a);
  ASSERT_GE(ta.size(), 3u);
  ASSERT_LT(ta.size(), 10u);
  EXPECT_TRUE(std::equal(ta.begin(), ta.end(), solo_a.begin()));
  EXPECT_EQ(port_.Tokens(2), Solo(b));
  EXPECT_EQ(port_.Dones().front().request_id, 1u);
}

// k3-server's liveness check (docs/server.md "Compute liveness"): a Ping is answered between
// passes while requests run (before their Done), and at once when idle; the ids do not change.
TEST_F(SchedulerTest, APingIsAnsweredBetweenPassesAndWhenIdle) {
  for (int batch : {1, 2}) {
    port_.sent.clear();
    Scheduler& core = Core(batch);
    const cp::Generate a = Gen(1, {1, 5, 9, 200, 77}, 10);
    port_.inbox = {a};
    port_.on_send = [this](const Outgoing& m) {
      if (const auto* t = std::get_if<cp::Token>(&m); t && t->index == 2) port_.inbox.push_back(cp::Ping{77});
    };
    core.Drain();
    port_.on_send = nullptr;
    const size_t pong = port_.FirstIndex([](const Outgoing& m) {
      const auto* p = std::get_if<cp::Pong>(&m);
      return p && p->nonce == 77;
    });
    ASSERT_LT(pong, port_.sent.size()) << "batch " << batch;
    EXPECT_LT(pong, port_.FirstIndex(IsDone)) << "answered while the request ran";
    EXPECT_EQ(port_.Tokens(1), Solo(a));
    port_.inbox = {cp::Ping{78}};
    const size_t before = port_.sent.size();
    core.Drain();
    ASSERT_EQ(port_.sent.size(), before + 1);
    EXPECT_EQ(std::get<cp::Pong>(port_.sent.back()).nonce, 78u);
  }
}

TEST_F(SchedulerTest, AStopIdEndsTheRequestAfterIt) {
  Scheduler& core = Core(2);
  cp::Generate a = Gen(1, {1, 5, 9, 200, 77}, 10);
  const std::vector<int32_t> full = Solo(a);
  size_t first = 0;  // the first occurrence of the 4th token's id ends it
  while (full[first] != full[3]) ++first;
  a.stop_ids = {full[3]};
  const cp::Generate b = Gen(2, {3, 18, 42}, 6);
  port_.inbox = {a, b};
  core.Drain();
  const auto da = port_.DoneOf(1);
  ASSERT_TRUE(da);
  EXPECT_EQ(da->reason, cp::StopReason::kStopId);
  EXPECT_EQ(port_.Tokens(1), std::vector<int32_t>(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(first) + 1));
  EXPECT_EQ(port_.Tokens(2), Solo(b));
  EXPECT_EQ(port_.DoneOf(2)->reason, cp::StopReason::kLength);
}

TEST_F(SchedulerTest, AStopEndsEveryRunningRequestInterrupted) {
  Scheduler& core = Core(3);
  port_.inbox = {Gen(1, {1, 5, 9, 200, 77}, 10), Gen(2, {3, 18, 42}, 10), Gen(3, {4, 4}, 10)};
  port_.on_send = [this](const Outgoing& m) {
    if (const auto* t = std::get_if<cp::Token>(&m); t && t->request_id == 2 && t->index == 1) port_.stop = true;
  };
  core.Drain();
  ASSERT_EQ(port_.Dones().size(), 3u);
  for (const cp::Done& d : port_.Dones()) EXPECT_EQ(d.reason, cp::StopReason::kInterrupted) << d.request_id;
  EXPECT_TRUE(core.interrupted());
}

TEST_F(SchedulerTest, APromptPassStoppedMidwayIsTornAndRefusesKeepState) {
  Scheduler& core = Core(1);
  int layers = 0;  // the forward pass stops between layers of the prompt pass
  fwd_->SetStopCheck([&layers] { return ++layers == 3; });
  port_.inbox = {Gen(1, {1, 5, 9}, 4)};
  core.Drain();
  ASSERT_TRUE(port_.DoneOf(1));
  EXPECT_EQ(port_.DoneOf(1)->reason, cp::StopReason::kInterrupted);
  EXPECT_TRUE(port_.Tokens(1).empty());
  EXPECT_TRUE(core.interrupted());
  EXPECT_TRUE(fwd_->torn());
  // A core over the torn sequence refuses to continue it.
  fwd_->SetStopCheck(nullptr);
  Scheduler& next = Core(1);
  cp::Generate k = Gen(2, {7}, 2);
  k.keep_state = true;
  port_.inbox = {k};
  EXPECT_THROW(
      {
        try {
          next.Drain();
        } catch (const Error& e) {
          EXPECT_EQ(std::string(e.what()), "Generate keep_state after a pass that was stopped midway");
          throw;
        }
      },
      Error);
}

// A new sequence starts from the longest snapshot that prefixes its prompt: the prompt minus
// its last id (taken at the mark), or a whole consumed sequence (taken at its end).
TEST_F(SchedulerTest, PrefixCacheReuseCountsAndKeepsTheIds) {
  // max_batch 1 with --spec: each request alone through RunGreedy; max_batch 2: batched sequences.
  for (const int max_batch : {1, 2}) {
    SCOPED_TRACE("max_batch " + std::to_string(max_batch));
    port_ = TestPort{};
    fwd_->Reset();
    Scheduler& core = Core(max_batch, 64 << 20);
    const int32_t spec = max_batch == 1 ? 2 : 0;
    const std::vector<int32_t> P = {1, 5, 9, 200, 77, 3};
    cp::Generate first = Gen(1, P, 4);
    first.spec = spec;
    port_.inbox = {first};
    core.Drain();
    const std::vector<int32_t> gen1 = port_.Tokens(1);
    ASSERT_EQ(gen1.size(), 4u);
    EXPECT_EQ(gen1, Solo(first));
    EXPECT_EQ(port_.DoneOf(1)->stats.cached_tokens, 0);
    // The same prompt: the mark snapshot, P minus its last id.
    cp::Generate again = Gen(2, P, 4);
    again.spec = spec;
    // The next turn: P, the generated ids but the last (never fed), and a new message.
    std::vector<int32_t> turn = P;
    turn.insert(turn.end(), gen1.begin(), gen1.end() - 1);
    const size_t consumed = turn.size();
    turn.insert(turn.end(), {42, 18});
    cp::Generate next = Gen(3, turn, 3);
    next.spec = spec;
    port_.inbox = {again};
    core.Drain();
    port_.inbox = {next};
    core.Drain();
    ASSERT_TRUE(port_.DoneOf(2) && port_.DoneOf(3));
    EXPECT_EQ(port_.DoneOf(2)->stats.cached_tokens, static_cast<int32_t>(P.size() - 1));
    EXPECT_EQ(port_.DoneOf(3)->stats.cached_tokens, static_cast<int32_t>(consumed));
    EXPECT_EQ(port_.Tokens(2), gen1);
    EXPECT_EQ(port_.Tokens(3), Solo(next));
    // The prompt passes fed only what the snapshots did not hold.
    const auto prefill_rows = [&](uint64_t request) {
      int64_t rows = 0;
      for (const cp::Step& s : port_.Steps())
        if (std::find(s.request_ids.begin(), s.request_ids.end(), request) != s.request_ids.end()) rows += s.prefill_rows;
      return rows;
    };
    EXPECT_EQ(prefill_rows(1), static_cast<int64_t>(P.size()));
    EXPECT_EQ(prefill_rows(2), 1);
    EXPECT_EQ(prefill_rows(3), 2);
  }
}

TEST_F(SchedulerTest, WithoutTheCacheNothingIsReused) {
  Scheduler& core = Core(2, 0);
  const std::vector<int32_t> P = {1, 5, 9, 200, 77, 3};
  port_.inbox = {Gen(1, P, 3)};
  core.Drain();
  port_.inbox = {Gen(2, P, 3)};
  core.Drain();
  EXPECT_EQ(port_.DoneOf(2)->stats.cached_tokens, 0);
  EXPECT_EQ(core.prefix_cache().size(), 0u);
  EXPECT_EQ(port_.Tokens(2), port_.Tokens(1));
}

// keep_state continues the kept sequence alone (not in a batch) and a request that ends is
// followed by the next one in arrival order.
TEST_F(SchedulerTest, KeepStateRunsAloneAfterTheBatchAndContinuesTheSequence) {
  Scheduler& core = Core(3);
  const cp::Generate a = Gen(1, {1, 5, 9, 200}, 3);
  cp::Generate k = Gen(2, {77, 3}, 3);
  k.keep_state = true;
  port_.inbox = {a, k};
  core.Drain();
  const std::vector<int32_t> ta = port_.Tokens(1);
  ASSERT_EQ(ta.size(), 3u);
  for (const cp::Step& s : port_.Steps()) EXPECT_EQ(s.sequences, 1);
  // The kept sequence: a's prompt, its 3 tokens, k's ids; k generates what that text would.
  std::vector<int32_t> whole = a.ids;
  whole.insert(whole.end(), ta.begin(), ta.end());
  whole.insert(whole.end(), k.ids.begin(), k.ids.end());
  EXPECT_EQ(port_.Tokens(2), Solo(Gen(9, whole, 3)));
  EXPECT_EQ(port_.DoneOf(2)->stats.position, static_cast<int32_t>(whole.size() + 3));
  EXPECT_EQ(core.sequence_ids().size(), whole.size() + 3);
}

// Save, Reset and Load between requests (StateDone says where the sequence is), and a
// keep_state request after the Load continues the saved sequence exactly.
TEST_F(SchedulerTest, StateOpsSaveResetLoadAndTheSequenceContinues) {
  Scheduler& core = Core(2);
  const std::string path = ::testing::TempDir() + "/scheduler-state-" + std::to_string(::getpid()) + ".k3s";
  const std::vector<int32_t> P = {1, 5, 9, 200, 77, 3};
  cp::Generate k = Gen(5, {42}, 3);
  k.keep_state = true;
  port_.inbox = {Gen(1, P, 3), cp::StateOp{2, cp::StateAction::kSave, path, "x"},
                 cp::StateOp{3, cp::StateAction::kReset, "", ""}, cp::StateOp{4, cp::StateAction::kLoad, path, ""}, k};
  core.Drain();
  std::filesystem::remove(path);
  std::vector<cp::StateDone> done;
  for (const Outgoing& m : port_.sent)
    if (const auto* d = std::get_if<cp::StateDone>(&m)) done.push_back(*d);
  ASSERT_EQ(done.size(), 3u);
  std::vector<int32_t> seq = P;
  const std::vector<int32_t> t1 = port_.Tokens(1);
  seq.insert(seq.end(), t1.begin(), t1.end());
  for (const cp::StateDone& d : done) EXPECT_TRUE(d.ok) << d.request_id << ": " << d.error;
  EXPECT_EQ(done[0].ids, seq);
  EXPECT_EQ(done[1].position, 0);
  EXPECT_EQ(done[2].ids, seq);
  EXPECT_EQ(done[2].extra, "x");
  seq.push_back(42);
  EXPECT_EQ(port_.Tokens(5), Solo(Gen(9, seq, 3)));
  // From the loaded state: only the last generated id (never fed) and the new one are fed.
  int64_t prefill = 0;
  for (const cp::Step& st : port_.Steps())
    if (st.request_ids == std::vector<uint64_t>{5}) prefill += st.prefill_rows;
  EXPECT_EQ(prefill, 2);
}

}  // namespace
}  // namespace k3::compute
