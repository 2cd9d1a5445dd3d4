#include "expert_hints.h"

#include <algorithm>

#include "mixers.h"
#include "ops.h"

namespace k3::compute {

const std::vector<int32_t>& NextLayerHints::Guess(const ModelConfig& cfg, int64_t next, const LayerWeights& w,
                                                  const float* a) {
  const int64_t H = cfg.hidden_size, E = cfg.num_experts, K = cfg.top_k;
  x_.resize(static_cast<size_t>(H));
  logits_.resize(static_cast<size_t>(E));
  weights_.resize(static_cast<size_t>(K));
  std::vector<int32_t>& guess = guesses_[next];
  guess.resize(static_cast<size_t>(K));
  RmsNorm(a, w.post_norm.data(), H, cfg.rms_norm_eps, x_.data());
  RouteTokens(cfg, w.moe, x_.data(), 1, logits_.data(), guess.data(), weights_.data());
  ++stats_.hints;
  return guess;
}

void NextLayerHints::Score(int64_t layer, const int32_t* chosen, int64_t k) {
  const auto it = guesses_.find(layer);
  if (it == guesses_.end()) return;
  const std::vector<int32_t>& guess = it->second;
  stats_.guessed += static_cast<uint64_t>(k);
  for (int64_t j = 0; j < k; ++j)
    if (std::find(guess.begin(), guess.end(), chosen[j]) != guess.end()) ++stats_.matched;
  guesses_.erase(it);
}

}  // namespace k3::compute
