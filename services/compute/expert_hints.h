// Next-layer expert hints: while layer l's routed experts are being read and applied, guess
// which experts layer l+1 will route to and tell the expert source, so a fetcher that would
// otherwise sit idle between layers reads them ahead. The guess applies layer l+1's own norm,
// router and bias to layer l's FFN input (the residual stream changes little across one
// layer); it needs layer l+1's trunk to be in memory already (pinned, or read ahead), and is
// skipped otherwise. Guesses only move reads earlier: the forward pass still requests what
// the router chooses and its arithmetic never sees a hint, so the ids are the same with or
// without them.
#pragma once
#include <cstdint>
#include <map>
#include <vector>

#include "weights.h"

namespace k3::compute {

struct HintStats {
  uint64_t hints = 0;      // layers a guess was sent for
  uint64_t guessed = 0;    // experts of routed layers that had a guess (top_k each)
  uint64_t matched = 0;    // of those, experts the router then chose
  double recall() const { return guessed ? static_cast<double>(matched) / guessed : 0.0; }
};

class NextLayerHints {
 public:
  // Layer `next`'s likely top-k for one token whose FFN input before the norm is `a` (hidden
  // floats); kept until Score(next) compares it with the router's choice.
  const std::vector<int32_t>& Guess(const ModelConfig& cfg, int64_t next, const LayerWeights& w,
                                    const float* a);
  // The router's choice for `layer` (top_k ids of one token); counts how many were guessed.
  void Score(int64_t layer, const int32_t* chosen, int64_t k);
  const HintStats& stats() const { return stats_; }

 private:
  std::map<int64_t, std::vector<int32_t>> guesses_;  // by layer, not yet scored
  std::vector<float> x_, logits_, weights_;
  HintStats stats_;
};

}  // namespace k3::compute
