// The per-layer blocks of the forward pass, each over a chunk of T consecutive tokens
// x[T][hidden] (already normalised) → out[T][hidden]. Every per-token result is the same
// arithmetic whatever T is, so chunked prefill equals token-by-token decoding bit for bit.
#pragma once
#include <cstdint>
#include <string>

#include "rollback.h"
#include "sources.h"
#include "state.h"

namespace k3::compute {

// Kimi Delta Attention (docs/model.md, "Kimi Delta Attention"); advances the recurrent state and conv windows.
// `journal` (may be null) records what KdaKeepFirst needs (rollback.h).
void KdaForward(const ModelConfig& cfg, const KdaWeights& w, KdaState& st, const float* x,
                int64_t T, float* out, KdaJournal* journal = nullptr);

// Returns st to "after the first `keep` tokens" of the pass `j` recorded: the snapshot, then
// the conv-window shifts and KdaSteps of those tokens replayed. No weights are needed.
void KdaKeepFirst(const ModelConfig& cfg, KdaState& st, const KdaJournal& j, int64_t keep);

// Gated MLA with NoPE in the absorbed form over the latent cache ("Gated MLA"); appends T rows.
void MlaForward(const ModelConfig& cfg, const MlaWeights& w, MlaCache& cache, const float* x,
                int64_t T, float* out);

// SiTU-GLU MLP (dense layer 0 and the shared experts; "SiTU-GLU feed-forward").
void FfnForward(const ModelConfig& cfg, const FfnWeights& w, const float* x, int64_t T,
                float* out);

// Router ("Latent MoE" steps 1-3) for T tokens of x[T][hidden]: logits[T][E], then per token the top-k
// ids idx[T][K] and their weights[T][K] (Route in ops.h).
void RouteTokens(const ModelConfig& cfg, const MoeWeights& w, const float* x, int64_t T, float* logits,
                 int32_t* idx, float* weights);

// A guess to pass on to the expert source (ExpertSource::Hint) once this layer's own request
// is out, so the source never sees the guess before the demand.
struct ExpertHint {
  int64_t layer = -1;
  std::vector<int32_t> experts;
};

// Stable LatentMoE ("Latent MoE"); topk_out[T][top_k] receives the selected experts (may be null);
// `hint` (may be null) is handed to `experts` right after this layer's request.
void MoeForward(const ModelConfig& cfg, int64_t layer, const MoeWeights& w, ExpertSource& experts,
                const float* x, int64_t T, float* out, int32_t* topk_out, const ExpertHint* hint = nullptr);

// --expert-inputs: "f32" -> false, "bf16" -> true (ModelConfig::expert_inputs_bf16); anything
// else is a UsageError. ExpertIsa names the body the routed-expert products run on.
bool ExpertInputsBf16(const std::string& name);
const char* ExpertIsa(const ModelConfig& cfg);

}  // namespace k3::compute
