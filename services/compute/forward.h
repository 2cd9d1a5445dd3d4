// The K3 model forward over a chunk of tokens (docs/model.md, "Layer wiring and Attention Residuals"): embedding,
// 93 (or cfg.num_layers) decoder layers with Attention Residuals, output AttnRes, final norm
// and lm_head. State (KDA, conv, MLA cache) is carried between calls, so a prompt can be fed
// in chunks and generation one token at a time.
#pragma once
#include <cstdint>
#include <functional>
#include <utility>

#include "expert_hints.h"
#include "rollback.h"
#include "sources.h"
#include "state.h"
#include "trace.h"

namespace k3::compute {

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
  void LoadState(SequenceState s) {
    state_ = std::move(s);
    torn_ = false;
  }
  bool torn() const { return torn_; }
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
  SequenceState state_;
  bool torn_ = false;
  VerifyJournal journal_;
  std::function<bool()> stop_check_;
  bool hints_on_ = false;
  NextLayerHints hints_;
};

}  // namespace k3::compute
