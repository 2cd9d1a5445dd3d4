// The per-token primitive ops of the K3 forward pass (docs/model.md, "Forward pass"). Each works on one
// token's vectors (or one head), so the same arithmetic runs whatever the chunk size or
// thread count; callers parallelise over tokens / heads / channels. Reductions accumulate
// in double in a fixed order: cheap next to the matmuls and close to the float64 reference.
#pragma once
#include <cstdint>

namespace k3::compute {

// y = w ⊙ x / sqrt(mean(x²) + eps); w == nullptr means an unweighted norm. y may alias x.
void RmsNorm(const float* x, const float* w, int64_t n, double eps, float* y);

// y = x / sqrt(Σ x² + eps) (a sum, not a mean: FLA l2norm). y may alias x.
void L2Norm(const float* x, int64_t n, double eps, float* y);

// SiTU-GLU: [β1·tanh(a/β1)·σ(a)]·[β2·tanh(b/β2)]; the σ sees the uncapped a.
// cap_up = false leaves b uncapped (config without activation_situ_linear_beta).
void SituGlu(const float* a, const float* b, int64_t n, double beta1, double beta2, bool cap_up,
             float* y);

// Attention Residuals aggregator over m candidates (the running sum last): keys are the
// unweighted RMS-normalised candidates, scores = key · w_fold (w_fold = w_norm ⊙ w_proj),
// softmax over candidates, output = Σ p_i · cand_i (raw candidates). y must not alias cands.
void AttnRes(const float* const* cands, int m, const float* w_fold, int64_t n, double eps,
             float* y);

// Depthwise causal conv with fused SiLU, one channel range [c0, c1) for T tokens.
// taps[C][K] (oldest→newest; tap K-1 multiplies the current input), state[C][K-1] (oldest
// first, the previous K-1 pre-conv inputs, updated in place), u[T][ldu], out[T][ldu].
void ShortConv(const float* taps, int K, float* state, const float* u, int64_t T, int64_t ldu,
               int64_t c0, int64_t c1, float* out);

// KDA forget gate, log domain: g[h·D+d] = lower · σ(exp(a_log[h]) · (z + dt_bias)[h·D+d]).
void KdaGate(const float* a_log, const float* z, const float* dt_bias, int64_t H, int64_t D,
             double lower, float* g);

// One delta-rule step on one head's state S[D][D] ([key i][value j]) in the load-bearing
// order decay → read → write → output. q is normalised and scaled, k normalised.
void KdaStep(float* S, int64_t D, const float* q, const float* k, const float* v,
             const float* alpha, float beta, float* o);

// Gated RMSNorm of one head: y = o/sqrt(mean(o²)+eps) ⊙ w ⊙ σ(gate).
void GatedRmsNorm(const float* o, const float* w, const float* gate, int64_t D, double eps,
                  float* y);

// Router for one token: s = σ(logits); top-k by s + bias (descending, ties → lower id);
// weights from the unbiased s, renormalised (+1e-20) when renormalize, times scaling.
void Route(const float* logits, const float* bias, int64_t E, int64_t K, bool renormalize,
           double scaling, int32_t* idx, float* weights);

// In-place softmax of n scores (max-subtracted, double sum).
void Softmax(float* s, int64_t n);

// Reference-form MLA attention for one query and one head over S cache rows (used by the op
// tests; the engine runs the absorbed form in mla.cpp with the same Softmax):
// score_s = (q_nope·k_nope[s] + q_pe·k_pe[s]) · scale; out = Σ p_s v[s].
// k_nope rows are ld_k apart, k_pe rows ld_pe apart, v rows ld_v apart.
void MlaAttendHead(const float* q_nope, const float* q_pe, int64_t nope, int64_t rope,
                   const float* k_nope, int64_t ld_k, const float* k_pe, int64_t ld_pe,
                   const float* v, int64_t ld_v, int64_t vdim, int64_t S, double scale,
                   float* scratch_S, float* out);

inline float Sigmoid(float x) { return 1.0f / (1.0f + __builtin_expf(-x)); }

}  // namespace k3::compute
