// The K3 model forward over a chunk of tokens (docs/model.md, "Layer wiring and Attention Residuals"): embedding,
// 93 (or cfg.num_layers) decoder layers with Attention Residuals, output AttnRes, final norm
// and lm_head. State (KDA, conv, MLA cache) is carried between calls, so a prompt can be fed
// in chunks and generation one token at a time.
#pragma once
#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "expert_hints.h"
#include "rollback.h"
#include "sources.h"
#include "state.h"
#include "trace.h"

namespace k3::compute {

// One sequence's rows in a batched pass (Forward::RunBatch): `T` ids fed after `state`'s
// position, with the sequence's own state. logits receives [T][vocab] when all_positions,
// else [vocab] for the last row only; null skips the head for this sequence.
struct Segment {
  SequenceState* state = nullptr;
  const int32_t* ids = nullptr;
  int64_t T = 0;
  bool all_positions = false;
  float* logits = nullptr;
};

class Forward {
 public:
  // `head` (optional) supplies embedding rows and logits instead of globals.embed/lm_head.
  Forward(const ModelConfig& cfg, const GlobalWeights& globals, LayerSource& layers,
          ExpertSource& experts, HeadSource* head = nullptr);

  void Reset();  // a fresh sequence
  int64_t position() const { return state_.position; }
  const SequenceState& state() const { return state_; }
  // State files: replaces the sequence state (a loaded one). torn(): a Run stopped between
  // layers (StopAtSafePoint) left the state half-updated; only Reset or LoadState mend it.
  void LoadState(SequenceState s, bool torn = false) {
    state_ = std::move(s);
    torn_ = torn;
  }
  // Hands the sequence state to a caller that runs it elsewhere (a batched sequence, which
  // reuses its memory); this Forward is then torn until LoadState or Reset.
  SequenceState TakeState() {
    SequenceState s = std::move(state_);
    state_ = SequenceState{};
    torn_ = true;
    return s;
  }
  bool torn() const { return torn_; }
  // The sequence will hold at most `positions` tokens (the context): the MLA caches take
  // their whole size now instead of growing (SequenceState::ReserveContext).
  void ReserveContext(int64_t positions) { state_.ReserveContext(cfg_, positions); }
  // The same from a state that stays with its owner (a prefix snapshot): copied into the live
  // buffers, so no second full sequence state exists at any moment (the plan counts one).
  void CopyState(const SequenceState& s) {
    state_ = s;
    torn_ = false;
  }

  // Consumes ids[0..T) after the current state. logits receives [T][vocab] when
  // all_positions, else [vocab] for the last token only; null skips the head.
  // trace (may be null) gets the per-layer activations of these T tokens appended.
  void Run(const int32_t* ids, int64_t T, bool all_positions, float* logits, Tracer* trace);

  // One pass over every layer's weights for several sequences (docs/pipeline.md "Batched
  // steps"): the segments' rows are stacked; per-row work and the mixers' projections run
  // once over all of them, the recurrence / attention per segment on its own state. Each
  // segment's logits and new state are bit-identical to a Run of it alone. The segments'
  // states must be distinct and not this Forward's own (state()); no trace, no journal. A
  // StopAtSafePoint leaves every segment's state half-updated (torn).
  void RunBatch(const std::vector<Segment>& segments);

  // Distinct experts the last pass (Run or RunBatch) requested, per layer (0 for dense ones).
  const std::vector<int64_t>& pass_experts() const { return pass_experts_; }
  // Called at the end of every completed pass with its rows and wall seconds (compute's Step
  // messages); empty: nothing. Never touches the arithmetic.
  void SetPassObserver(std::function<void(int64_t rows, double seconds)> f) { on_pass_ = std::move(f); }

  // Speculative verification (speculate.h): the next Run records a journal (rollback.h), and
  // KeepFirst(keep) then leaves the state exactly as if only the first `keep` tokens of that
  // Run had been fed (0 <= keep <= T; 0 also after a Run a stop ended early). No weights are
  // read. journal_bytes() is what the journal holds (the plan's spec-rollback region).
  void BeginVerify();
  void KeepFirst(int64_t keep);
  bool verifying() const { return journal_.open; }
  int64_t journal_bytes() const;

  // Called after every layer; when it returns true, Run throws StopAtSafePoint (sources.h).
  // Only ever reads a flag: it never touches the arithmetic.
  void SetStopCheck(std::function<bool()> check) { stop_check_ = std::move(check); }

  // Next-layer expert hints (expert_hints.h) during one-token steps; off by default.
  void EnableHints(bool on) { hints_on_ = on; }
  const HintStats& hint_stats() const { return hints_.stats(); }

 private:
  const ModelConfig& cfg_;
  const GlobalWeights& g_;
  LayerSource& layers_;
  ExpertSource& experts_;
  HeadSource* head_ = nullptr;
  // The pass both Run and RunBatch are; `journal` only with one segment.
  void Pass(const std::vector<Segment>& segments, Tracer* trace, bool journal);

  SequenceState state_;
  std::vector<int64_t> pass_experts_;
  std::function<void(int64_t, double)> on_pass_;
  bool torn_ = false;
  VerifyJournal journal_;
  std::function<bool()> stop_check_;
  bool hints_on_ = false;
  NextLayerHints hints_;
};

}  // namespace k3::compute
