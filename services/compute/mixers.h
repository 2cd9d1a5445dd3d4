// The per-layer blocks of the forward pass, each over N stacked rows x[N][hidden] (already
// normalised) → out[N][hidden]. The rows are one or more sequences' chunks (a batch: RowSpan);
// every per-token result is the same arithmetic whatever the chunk, the batch or N is, so
// chunked prefill equals token-by-token decoding, and a sequence in a batch equals it alone,
// bit for bit. The mixers run their projections once over all N rows and only the
// recurrence / attention per sequence, on that sequence's state.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "rollback.h"
#include "sources.h"
#include "state.h"

namespace k3::compute {

// Rows [row0, row0 + T) of the stacked rows belong to one sequence, in token order.
struct RowSpan {
  int64_t row0 = 0, T = 0;
};

// Kimi Delta Attention (docs/model.md, "Kimi Delta Attention"); advances each span's recurrent
// state and conv windows (st[i] for spans[i]). `journal` (may be null; one span only) records
// what KdaKeepFirst needs (rollback.h).
void KdaForward(const ModelConfig& cfg, const KdaWeights& w, const std::vector<KdaState*>& st,
                const std::vector<RowSpan>& spans, const float* x, int64_t N, float* out,
                KdaJournal* journal = nullptr);

// Returns st to "after the first `keep` tokens" of the pass `j` recorded: the snapshot, then
// the conv-window shifts and KdaSteps of those tokens replayed. No weights are needed.
void KdaKeepFirst(const ModelConfig& cfg, KdaState& st, const KdaJournal& j, int64_t keep);

// Gated MLA with NoPE in the absorbed form over the latent cache ("Gated MLA"); appends each
// span's T rows to its own cache (cache[i] for spans[i]).
void MlaForward(const ModelConfig& cfg, const MlaWeights& w, const std::vector<MlaCache*>& cache,
                const std::vector<RowSpan>& spans, const float* x, int64_t N, float* out);

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
// `hint` (may be null) is handed to `experts` right after this layer's request. Returns how
// many distinct experts it requested (the union over the T rows, each read once).
int64_t MoeForward(const ModelConfig& cfg, int64_t layer, const MoeWeights& w, ExpertSource& experts,
                const float* x, int64_t T, float* out, int32_t* topk_out, const ExpertHint* hint = nullptr);

// --expert-inputs: "f32" -> false, "bf16" -> true (ModelConfig::expert_inputs_bf16); anything
// else is a UsageError. ExpertIsa names the body the routed-expert products run on.
bool ExpertInputsBf16(const std::string& name);
const char* ExpertIsa(const ModelConfig& cfg);

}  // namespace k3::compute
