// One new sequence of compute's batch (docs/pipeline.md "Batched steps"): RunGreedy's loop
// (generate.h) cut into forward passes, so that several sequences share each pass over the
// weights. The scheduler asks NextSegment() for this step's rows (the next prompt chunk, or
// the token chosen last), runs one Forward::RunBatch over every sequence's segment, then
// AfterPass() does what RunGreedy does between its passes: prompt hooks, choosing and
// emitting a token, the stop, length and cancel checks, in the same order and with the same
// sampler arguments, so a sequence emits what RunGreedy emits for it alone.
#pragma once
#include <chrono>
#include <cstdint>
#include <vector>

#include "forward.h"
#include "generate.h"

namespace k3::compute {

class BatchedSequence {
 public:
  // `p` without full_recompute or spec (ignored: same ids); p.ids non-empty; `state` the
  // sequence's state after p.prior (a fresh one for a new sequence, or a prefix snapshot's
  // copy). p.marks and hooks.at_mark as in RunGreedy: a prompt chunk crossing a mark ends
  // there, and at_mark(mark) sees state() after exactly p.ids[0..mark).
  BatchedSequence(int64_t vocab, GreedyParams p, GreedyHooks hooks, SequenceState state);

  bool ended() const { return ended_; }
  bool prefilling() const { return !ended_ && !r_.prefill_done; }
  // This step's rows; valid until AfterPass. Not after ended().
  Segment NextSegment();
  // After the pass that ran NextSegment()'s rows (`seconds` its wall time).
  void AfterPass(double seconds);
  // A stop: at a safe point between passes (torn = false), or the pass itself stopped midway
  // (torn: the state is half-updated).
  void Interrupt(bool torn);

  bool torn() const { return torn_; }
  Ending ending() const { return r_.ending; }
  SequenceState& state() { return state_; }
  // The result as RunGreedy returns it (valid once ended()).
  GreedyResult Result() const;

 private:
  void Emit();  // chooses, emits and checks token index_
  void End(Ending e) {
    ended_ = true;
    r_.ending = e;
  }

  using Clock = std::chrono::steady_clock;
  int64_t V_;
  GreedyParams p_;
  GreedyHooks hooks_;
  SequenceState state_;
  GreedyResult r_;
  bool ended_ = false, torn_ = false;
  int64_t fed_ = 0;         // prompt ids fed
  int64_t last_T_ = 0;      // rows of the segment in flight
  int64_t gen_ = 0;         // tokens it may generate (set when the prompt is done)
  int64_t index_ = 0;       // the next token's index
  int32_t next_ = 0;        // the token fed in the next decode pass
  std::vector<int32_t> seq_;  // prior + prompt + generated: what the sampler sees
  size_t before_generation_ = 0;
  std::vector<float> logits_, chunk_logits_;
  Clock::time_point t0_, t1_, t_last_;
};

}  // namespace k3::compute
