#include <algorithm>
#include <cmath>
#include <vector>

#include "common/error.h"

#include "mixers.h"
#include "ops.h"

namespace k3::compute {

namespace {

// The delta-rule recurrence of head h over T tokens of [T][P] inputs (β: [T][H]), in token
// order; `each(offset of the token's head slice, read-out)` after every step. The forward
// pass and the rollback replay share it, so the replayed state has the forward's bits.
template <class Each>
void HeadSteps(float* S, int64_t D, int64_t P, int64_t H, int64_t h, int64_t T, const float* q, const float* k,
               const float* v, const float* a, const float* beta, Each each) {
  std::vector<float> o(static_cast<size_t>(D));
  for (int64_t t = 0; t < T; ++t) {
    const int64_t off = t * P + h * D;
    KdaStep(S, D, q + off, k + off, v + off, a + off, beta[t * H + h], o.data());
    each(off, o.data());
  }
}

}  // namespace

void KdaForward(const ModelConfig& cfg, const KdaWeights& w, const std::vector<KdaState*>& st,
                const std::vector<RowSpan>& spans, const float* x, int64_t N, float* out,
                KdaJournal* journal) {
  const int64_t P = cfg.kda_proj(), H = cfg.kda_heads, D = cfg.kda_head_dim;
  const int K = static_cast<int>(cfg.conv_kernel);
  const int64_t nseq = static_cast<int64_t>(spans.size());
  if (journal && nseq != 1) throw RuntimeFailure("kda: a verify journal covers one sequence");
  const size_t TP = static_cast<size_t>(N * P);
  std::vector<float> q(TP), k(TP), v(TP), gate(TP), z(TP), y(TP);
  std::vector<float> fa(static_cast<size_t>(N * D)), beta(static_cast<size_t>(N * H));

  // 1. projections, once over every sequence's rows (one read of each weight per pass)
  TrunkMatmul(w.trunk, TensorRole::kKdaQProj, w.q, x, N, q.data());
  TrunkMatmul(w.trunk, TensorRole::kKdaKProj, w.k, x, N, k.data());
  TrunkMatmul(w.trunk, TensorRole::kKdaVProj, w.v, x, N, v.data());
  TrunkMatmul(w.trunk, TensorRole::kKdaBProj, w.b, x, N, beta.data());
  TrunkMatmul(w.trunk, TensorRole::kKdaFAProj, w.f_a, x, N, fa.data());
  TrunkMatmul(w.trunk, TensorRole::kKdaFBProj, w.f_b, fa.data(), N, z.data());
  TrunkMatmul(w.trunk, TensorRole::kKdaGProj, w.g, x, N, gate.data());

  if (journal) {  // the state before the pass and the pre-conv inputs (the conv runs in place)
    journal->recorded = true;
    journal->T = N;
    journal->S0 = st[0]->S;
    journal->conv0.clear();
    journal->pre.clear();
    for (const std::vector<float>* u : {&st[0]->conv_q, &st[0]->conv_k, &st[0]->conv_v})
      journal->conv0.insert(journal->conv0.end(), u->begin(), u->end());
    for (const std::vector<float>* u : {&q, &k, &v}) journal->pre.insert(journal->pre.end(), u->begin(), u->end());
  }

  // 2. short causal conv + SiLU, in place, per sequence on its own windows; channels are
  // independent, time is sequential.
  const int64_t kChanBlock = 256;
  const int64_t nblk = (P + kChanBlock - 1) / kChanBlock;
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < nseq * 3 * nblk; ++b) {
    const int64_t i = b / (3 * nblk), sb = b % (3 * nblk);
    const int64_t s = sb / nblk, c0 = (sb % nblk) * kChanBlock;
    const int64_t c1 = std::min(P, c0 + kChanBlock);
    const RowSpan& sp = spans[static_cast<size_t>(i)];
    KdaState& seq = *st[static_cast<size_t>(i)];
    float* u = (s == 0 ? q.data() : s == 1 ? k.data() : v.data()) + sp.row0 * P;
    const std::vector<float>& taps = s == 0 ? w.conv_q : s == 1 ? w.conv_k : w.conv_v;
    std::vector<float>& state = s == 0 ? seq.conv_q : s == 1 ? seq.conv_k : seq.conv_v;
    ShortConv(taps.data(), K, state.data(), u, sp.T, P, c0, c1, u);
  }

  // 3-5. per token and head: L2 norms (q also scaled by 1/sqrt(D)), β, forget gate → α.
  // (token, head) pairs in parallel: at one token the gate's exp calls alone are ~0.5 ms.
  const float qscale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(D)));
#pragma omp parallel for schedule(static)
  for (int64_t th = 0; th < N * H; ++th) {
    const int64_t t = th / H, h = th % H;
    const int64_t off = t * P + h * D;
    float* qh = q.data() + off;
    L2Norm(qh, D, 1e-6, qh);
    for (int64_t d = 0; d < D; ++d) qh[d] *= qscale;
    float* kh = k.data() + off;
    L2Norm(kh, D, 1e-6, kh);
    float& bt = beta[static_cast<size_t>(th)];
    bt = static_cast<float>(1.0 / (1.0 + std::exp(-static_cast<double>(bt))));
    float* zh = z.data() + off;
    KdaGate(w.a_log.data() + h, zh, w.dt_bias.data() + h * D, 1, D, cfg.gate_lower_bound, zh);
    for (int64_t d = 0; d < D; ++d) zh[d] = std::exp(zh[d]);  // α = exp(g)
  }
  if (journal) {
    journal->q = q;
    journal->k = k;
    journal->v = v;
    journal->a = z;
    journal->beta = beta;
  }

  // 6. delta-rule recurrence: (sequence, head) pairs in parallel, tokens in order, each on its
  // sequence's state; 7. gated norm per head.
#pragma omp parallel for schedule(static)
  for (int64_t ih = 0; ih < nseq * H; ++ih) {
    const int64_t i = ih / H, h = ih % H;
    const RowSpan& sp = spans[static_cast<size_t>(i)];
    const int64_t base = sp.row0 * P;
    HeadSteps(st[static_cast<size_t>(i)]->S.data() + h * D * D, D, P, H, h, sp.T, q.data() + base,
              k.data() + base, v.data() + base, z.data() + base, beta.data() + sp.row0 * H,
              [&](int64_t off, const float* o) {
                GatedRmsNorm(o, w.o_norm.data(), gate.data() + base + off, D, cfg.rms_norm_eps,
                             y.data() + base + off);
              });
  }
  TrunkMatmul(w.trunk, TensorRole::kKdaOProj, w.o, y.data(), N, out);
}

void KdaKeepFirst(const ModelConfig& cfg, KdaState& st, const KdaJournal& j, int64_t keep) {
  const int64_t P = cfg.kda_proj(), H = cfg.kda_heads, D = cfg.kda_head_dim;
  const int64_t W = cfg.conv_kernel > 0 ? cfg.conv_kernel - 1 : 0;
  if (!j.recorded || keep == j.T) return;  // nothing recorded, or everything kept
  st.S = j.S0;
  // Conv windows: the previous K-1 pre-conv inputs, shifted exactly as ShortConv does.
  std::vector<float>* win[3] = {&st.conv_q, &st.conv_k, &st.conv_v};
  for (int s = 0; s < 3; ++s) {
    std::copy(j.conv0.begin() + s * P * W, j.conv0.begin() + (s + 1) * P * W, win[s]->begin());
    const float* u = j.pre.data() + s * j.T * P;
    for (int64_t c = 0; c < P && W > 0; ++c) {
      float* w = win[s]->data() + c * W;
      for (int64_t t = 0; t < keep; ++t) {
        for (int64_t i = 0; i + 1 < W; ++i) w[i] = w[i + 1];
        w[W - 1] = u[t * P + c];
      }
    }
  }
  // The recurrence: the same KdaStep calls on the recorded inputs, heads in parallel.
#pragma omp parallel for schedule(static)
  for (int64_t h = 0; h < H; ++h)
    HeadSteps(st.S.data() + h * D * D, D, P, H, h, keep, j.q.data(), j.k.data(), j.v.data(), j.a.data(),
              j.beta.data(), [](int64_t, const float*) {});
}

}  // namespace k3::compute
