// Speculative decoding with n-gram drafts (docs/pipeline.md, "Speculative decoding"): the
// tokens that followed an earlier occurrence of the sequence's suffix are proposed, the
// emitted token and the drafts go through the model in one pass (the chunked-prefill path,
// every position's logits), and the chooser picks at every position exactly what the
// one-token loop would have picked from the same logits and the same ids. The longest prefix
// of drafts that agrees is kept, then the model's own next token; the sequence state keeps
// only what was emitted (Forward::KeepFirst, rollback.h). So the ids never depend on the
// number of drafts: greedy or sampled, --spec N gives the ids of --spec 0.
#pragma once
#include <cstdint>
#include <deque>
#include <functional>
#include <vector>

#include "forward.h"

namespace k3::compute {

// Picks the next id from the logits that predict it and the ids so far (prompt and generated;
// the position is seq.size()). Must be a pure function of its inputs.
using TokenChooser = std::function<int32_t(const float* logits, const std::vector<int32_t>& seq)>;

// The longest suffix of seq of length max_ngram..1 that also occurs earlier (most recent
// occurrence first): the ids that followed that occurrence, at most max_drafts (they may run
// into the suffix itself, which is how a repeating pattern continues). Empty when no suffix
// recurs.
std::vector<int32_t> DraftNgram(const std::vector<int32_t>& seq, int64_t max_drafts, int64_t max_ngram = 4);

// A token the verify pass chose, waiting to be emitted.
struct SpecToken {
  int32_t id = 0;
  bool drafted = false;            // a draft the model agreed with (one forward pass saved)
  const float* logits = nullptr;   // the logits that chose it (valid until the next Step)
  double seconds = 0;              // its share of the pass's wall time
};

class Speculator {
 public:
  Speculator(Forward& fwd, int64_t vocab, int64_t max_drafts, TokenChooser choose);

  // seq.back() was just emitted and is not fed yet. Feeds it, with the drafts that follow it
  // when there are any (at most `allowed` - 1: `allowed` is how many more tokens may be
  // emitted; drafts after a stop id are dropped), and queues the chosen tokens (1 to
  // drafts + 1). Needs an empty queue. A StopAtSafePoint during the pass propagates, with the
  // state returned to "seq.back() not fed".
  void Step(std::vector<int32_t>& seq, int64_t allowed, const std::vector<int32_t>& stop_ids);
  bool pending() const { return !queue_.empty(); }
  SpecToken Pop();
  // Ends the last verify pass: the state keeps the tokens fed up to the last one popped
  // (which is itself not fed, as in the one-token loop). Called before the next Step and
  // when generation ends.
  void Settle();

  int64_t drafted() const { return drafted_; }    // drafts verified
  int64_t accepted() const { return accepted_; }  // of them, emitted

 private:
  Forward& fwd_;
  const int64_t V_, max_drafts_;
  TokenChooser choose_;
  std::vector<float> logits_;  // [drafts + 1][V] of the last pass
  std::deque<SpecToken> queue_;
  int64_t popped_ = 0;         // tokens popped since the last pass
  int64_t drafted_ = 0, accepted_ = 0;
};

}  // namespace k3::compute
