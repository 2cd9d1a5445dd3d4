// The core of k3-compute's pipeline mode (docs/pipeline.md "k3-compute", "Batched steps",
// "Prefix cache"): it takes the launcher's compute messages (Generate, Cancel, StateOp), runs
// them on a Forward — alone through RunGreedy, or new sequences together, up to max_batch, in
// shared passes (batch_sequence.h) — offers prefix snapshots, and produces what goes back
// (Token, Step, Done, StateDone, control Stats) as values. It owns no socket and no signal:
// its shell (compute_service.cpp) moves messages between ZeroMQ and a SchedulerPort, and a
// test drives it in-process with the real Forward (tests/unit/compute/scheduler_test.cpp).
// Single-threaded.
#pragma once
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "common/ipc/messages.h"
#include "common/state_file.h"
#include "constraints.h"
#include "forward.h"
#include "generate.h"
#include "membw_probe.h"
#include "pipeline_counters.h"
#include "prefix_cache.h"
#include "prefix_store.h"
#include "sampler.h"
#include "scheduler_rules.h"

namespace k3::compute {

class BatchedSequence;

// Control Stats (the launcher's progress line and per-request report).
struct StatsOut {
  std::vector<ipc::control::Stat> stats;
};
// What the core sends, in the order it must leave: all but StatsOut to the launcher's compute
// endpoint, StatsOut on the control link.
using Outgoing = std::variant<ipc::compute::Token, ipc::compute::Step, ipc::compute::Done,
                              ipc::compute::StateDone, ipc::compute::Pong, StatsOut>;

// The core's view of its process (the shell's sockets and stop signals, or a test's queues).
class SchedulerPort {
 public:
  virtual ~SchedulerPort() = default;
  // A compute message that has arrived, without waiting; nullopt when none has.
  virtual std::optional<ipc::compute::Message> Receive() = 0;
  virtual void Send(Outgoing message) = 0;
  // A stop signal or control Shutdown (asked between tokens; the Forward's own stop check
  // covers the passes).
  virtual bool StopRequested() = 0;
  // Messages the control link threw away (the Stats' rejected_messages).
  virtual uint64_t ControlRejects() const = 0;
};

struct SchedulerOptions {
  int max_batch = 1;               // --max-batch
  int64_t prefix_cache_bytes = 0;  // --prefix-cache (0 = off)
  // --prefix-store DIR ("" = off), its cap (--prefix-store-size) and the snapshot interval of
  // long prompts (--prefix-store-interval; 0 = only at the prompt's end and Generate.snapshot_at).
  std::string prefix_store_dir;
  int64_t prefix_store_bytes = 0;
  int64_t prefix_store_interval = 0;
  int64_t prefill_chunk = 64;      // --prefill-chunk: the most prompt rows of one pass (the plan's chunk)
  std::string dump_logits;         // --dump-logits: the logits choosing each request's first token
  std::string tokenizer_dir;       // --tokenizer: Generate.constraint's vocabulary (constraints.h)
  bool probe_membw = false;        // --probe-membw: ProbeReadGBs(probe_regions) between steps
  std::vector<MemRegion> probe_regions;
  // What a pass uses, for the Step messages: every layer's trunk bytes, and per layer the bytes
  // of one routed expert (0 for dense layers).
  int64_t trunk_bytes_pass = 0;
  std::vector<int64_t> expert_bytes;
  // The model's identity for state files (asked at the first StateOp, or at the start with a
  // prefix store).
  std::function<state::ModelIdentity()> identify;
};

class Scheduler {
 public:
  // `fwd` runs every pass; `counters` are the weight sources' (read for Stats). All outlive it.
  Scheduler(const ModelConfig& cfg, Forward& fwd, const PipelineCounters& counters, SchedulerPort& port,
            SchedulerOptions opt);
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Answers every message that is waiting: those that arrived during a request first (held),
  // in order, then port.Receive() until it has none or a stop ended the process. A refused
  // Generate throws BadInput with RequestProblem's line.
  void Drain();
  // A stop ended a request: the process exits after it.
  bool interrupted() const { return interrupted_; }

  // The sequence's ids (prompts and generated, a loaded state's included).
  const std::vector<int32_t>& sequence_ids() const { return seq_ids_; }
  const PrefixCache& prefix_cache() const { return prefix_cache_; }
  const PrefixStore* prefix_store() const { return store_.get(); }

 private:
  struct Request;

  void Handle(const ipc::compute::Message& m);
  std::unique_ptr<Request> Prepare(const ipc::compute::Generate& g, bool batched);  // checks it (BadInput)
  GreedyHooks HooksFor(Request& r);
  void Answer(const ipc::compute::Generate& g);  // alone, through RunGreedy
  void ServeBatch(const ipc::compute::Generate& first);
  void Admit(const ipc::compute::Generate& g);
  void BatchStep();
  // A new sequence's state (the one place a batched sequence starts; it reuses the kept
  // sequence's memory, and the kept sequence is dropped as a new request always did): a copy
  // of the longest prefix snapshot of its prompt, else fresh (StartFromSnapshot).
  SequenceState InitSequence(Request& r);
  // Prefix reuse, for a new sequence run in a batch or alone. StartFromSnapshot: `into` (the
  // sequence's own state) becomes the longest snapshot that prefixes r's prompt, a copy from
  // the cache or, when the store holds a longer one, read from the store; fresh when there is
  // none (or r never starts from one). r then feeds only the rest (kept, cached, feed, p.ids,
  // p.prior say so). OfferCache sets r's snapshot points (p.marks, hooks.at_mark): for the
  // cache the prompt minus its last id and Generate.snapshot_at, for the store those and every
  // prefix_store_interval ids; and the sequence at its end (OfferEnd, cache only); each taken
  // from `state` (r's own sequence).
  void StartFromSnapshot(Request& r, SequenceState& into);
  void OfferCache(Request& r, GreedyHooks& hooks, std::function<const SequenceState*()> state);
  void OfferEnd(const Request& r, const std::vector<int32_t>& consumed_ids, const SequenceState& state, bool torn);
  void OfferToCache(std::span<const int32_t> consumed, uint64_t partition, const SequenceState& state);
  void Finish(Request& r, const GreedyResult& res);  // Stats, then Done
  void PrefillProgress(Request& r, int64_t done, int64_t total);
  void AnswerState(const ipc::compute::StateOp& op);  // Save/Load/Reset (docs/formats.md "State file")
  void PollMessages();  // Cancels mark running requests, Pings are answered; anything else waits in held_
  ipc::compute::Step MakeStep(int32_t sequences, int64_t rows, int64_t prefill_rows, double seconds,
                              std::vector<uint64_t> ids) const;
  void FlushStep();  // sends pending_step_, if any

  using Clock = std::chrono::steady_clock;
  const ModelConfig& cfg_;
  Forward& fwd_;
  const PipelineCounters& counters_;
  SchedulerPort& port_;
  SchedulerOptions opt_;
  bool interrupted_ = false;
  // The forward state has consumed the first fwd_.position() of seq_ids_; the rest are fed
  // before the next prompt.
  std::vector<int32_t> seq_ids_;
  std::optional<state::ModelIdentity> identity_;  // computed at the first StateOp
  std::deque<ipc::compute::Message> held_;  // arrived during a request, answered after it (not lost)
  std::vector<Request*> active_;  // the requests running now (batched or alone)
  std::vector<std::unique_ptr<Request>> batch_;  // the batched ones, in admission order
  std::optional<ipc::compute::Step> pending_step_;  // of the last pass, sent after its Tokens
  PrefixCache prefix_cache_;
  ConstraintLibrary constraints_;  // Generate.constraint: vocabulary and compiled schemas
  std::unique_ptr<PrefixStore> store_;  // null: no --prefix-store
};

}  // namespace k3::compute
