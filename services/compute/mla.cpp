#include <cmath>
#include <vector>

#include "mixers.h"
#include "ops.h"

namespace k3::compute {

namespace {

// Rows [row0, row0+n) of W as their own matrix view (kv_b's per-head V block).
kern::DenseMat RowBlock(const kern::DenseMat& W, int64_t row0, int64_t n) {
  kern::DenseMat m = W;
  const int64_t esz = W.format == kern::WFormat::F32 ? 4 : 2;
  m.data = static_cast<const uint8_t*>(W.data) + row0 * W.cols * esz;
  m.rows = n;
  return m;
}

}  // namespace

void MlaForward(const ModelConfig& cfg, const MlaWeights& w, const std::vector<MlaCache*>& caches,
                const std::vector<RowSpan>& spans, const float* x, int64_t N, float* out) {
  const int64_t nh = cfg.mla_heads, ql = cfg.q_lora_rank, kl = cfg.kv_lora_rank;
  const int64_t nope = cfg.qk_nope_head_dim, rope = cfg.qk_rope_head_dim, vd = cfg.v_head_dim;
  const int64_t qh = nope + rope, kvh = nope + vd, ckw = kl + rope;
  const double scale = 1.0 / std::sqrt(static_cast<double>(qh));

  std::vector<float> cq(static_cast<size_t>(N * ql)), q(static_cast<size_t>(N * nh * qh));
  std::vector<float> ckv(static_cast<size_t>(N * ckw));
  std::vector<float> attn(static_cast<size_t>(N * nh * vd)), gate(static_cast<size_t>(N * nh * vd));

  // Projections once over every sequence's rows.
  TrunkMatmul(w.trunk, TensorRole::kMlaQAProj, w.q_a, x, N, cq.data());
  for (int64_t t = 0; t < N; ++t)
    RmsNorm(cq.data() + t * ql, w.q_a_norm.data(), ql, cfg.mla_norm_eps, cq.data() + t * ql);
  TrunkMatmul(w.trunk, TensorRole::kMlaQBProj, w.q_b, cq.data(), N, q.data());
  TrunkMatmul(w.trunk, TensorRole::kMlaKvAProjWithMqa, w.kv_a, x, N, ckv.data());
  TrunkMatmul(w.trunk, TensorRole::kMlaGProj, w.g, x, N, gate.data());

  // Append each sequence's latent rows to its own cache: normalised c and the raw shared k_pe.
  // row_seq / row_pos: the sequence of each stacked row, and the cache length it sees.
  std::vector<int64_t> row_seq(static_cast<size_t>(N)), row_pos(static_cast<size_t>(N));
  for (size_t i = 0; i < spans.size(); ++i) {
    MlaCache& cache = *caches[i];
    const RowSpan& sp = spans[i];
    const int64_t S0 = cache.len;
    cache.c.resize(static_cast<size_t>((S0 + sp.T) * kl));
    cache.kpe.resize(static_cast<size_t>((S0 + sp.T) * rope));
    for (int64_t t = 0; t < sp.T; ++t) {
      const float* row = ckv.data() + (sp.row0 + t) * ckw;
      RmsNorm(row, w.kv_a_norm.data(), kl, cfg.mla_norm_eps, cache.c.data() + (S0 + t) * kl);
      for (int64_t d = 0; d < rope; ++d) cache.kpe[static_cast<size_t>((S0 + t) * rope + d)] = row[kl + d];
      row_seq[static_cast<size_t>(sp.row0 + t)] = static_cast<int64_t>(i);
      row_pos[static_cast<size_t>(sp.row0 + t)] = S0 + t + 1;  // causal: sees cache rows 0 .. S0+t
    }
    cache.len = S0 + sp.T;
  }
  const kern::DenseMat kv_b = TrunkWhole(w.trunk, TensorRole::kMlaKvBProj, w.kv_b);  // atomic: read per head

  // Absorbed attention, one (token, head) pair per iteration: q' = W_UKᵀ q_nope scores the
  // latent directly, and W_UV is applied once to the probability-weighted latent.
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t th = 0; th < N * nh; ++th) {
    const int64_t t = th / nh, h = th % nh;
    const MlaCache& cache = *caches[static_cast<size_t>(row_seq[static_cast<size_t>(t)])];
    const float* C = cache.c.data();
    const float* KP = cache.kpe.data();
    const int64_t S = row_pos[static_cast<size_t>(t)];
    const float* qn = q.data() + (t * nh + h) * qh;
    const float* qp = qn + nope;
    std::vector<float> qabs(static_cast<size_t>(kl)), mix(static_cast<size_t>(kl));
    std::vector<float> p(static_cast<size_t>(S));
    kern::MatmulTransposedRows(kv_b, h * kvh, nope, qn, qabs.data());
    for (int64_t s = 0; s < S; ++s) {
      const float* cs = C + s * kl;
      const float* ks = KP + s * rope;
      double dot = 0;
      for (int64_t d = 0; d < kl; ++d) dot += static_cast<double>(qabs[d]) * cs[d];
      for (int64_t d = 0; d < rope; ++d) dot += static_cast<double>(qp[d]) * ks[d];
      p[s] = static_cast<float>(dot * scale);
    }
    Softmax(p.data(), S);
    std::vector<double> macc(static_cast<size_t>(kl), 0.0);
    for (int64_t s = 0; s < S; ++s) {  // fixed order over s for every d
      const double ps = p[s];
      const float* cs = C + s * kl;
      for (int64_t d = 0; d < kl; ++d) macc[d] += ps * cs[d];
    }
    for (int64_t d = 0; d < kl; ++d) mix[d] = static_cast<float>(macc[d]);
    float* a = attn.data() + (t * nh + h) * vd;
    kern::Matmul(RowBlock(kv_b, h * kvh + nope, vd), mix.data(), 1, a);
  }

  // Output gate without a norm, then o_proj.
  for (size_t i = 0; i < attn.size(); ++i) attn[i] *= Sigmoid(gate[i]);
  TrunkMatmul(w.trunk, TensorRole::kMlaOProj, w.o, attn.data(), N, out);
}

}  // namespace k3::compute
