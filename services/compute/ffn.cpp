#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/row_tile.h"
#include "mixers.h"
#include "ops.h"

namespace k3::compute {

void FfnForward(const ModelConfig& cfg, const FfnWeights& w, const float* x, int64_t T,
                float* out) {
  const int64_t I = w.gate.rows;
  std::vector<float> a(static_cast<size_t>(T * I)), b(static_cast<size_t>(T * I));
  TrunkMatmul(w.trunk, w.gate_role, w.gate, x, T, a.data());
  TrunkMatmul(w.trunk, w.up_role, w.up, x, T, b.data());
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < T; ++t)
    SituGlu(a.data() + t * I, b.data() + t * I, I, cfg.situ_beta, cfg.situ_linear_beta,
            cfg.situ_linear_capped, a.data() + t * I);
  TrunkMatmul(w.trunk, w.down_role, w.down, a.data(), T, out);
}

bool ExpertInputsBf16(const std::string& name) {
  if (name == "f32") return false;
  if (name == "bf16") return true;
  throw UsageError("--expert-inputs must be f32 or bf16, not '" + name + "'");
}

const char* ExpertIsa(const ModelConfig& cfg) {
  return cfg.expert_inputs_bf16 ? kern::ActiveMxfp4Bf16InIsa() : kern::ActiveIsa();
}

void RouteTokens(const ModelConfig& cfg, const MoeWeights& w, const float* x, int64_t T, float* logits,
                 int32_t* idx, float* weights) {
  const int64_t E = cfg.num_experts, K = cfg.top_k;
  TrunkMatmul(w.trunk, TensorRole::kMoeGate, w.router, x, T, logits);
  for (int64_t t = 0; t < T; ++t)
    Route(logits + t * E, w.bias.data(), E, K, cfg.moe_renormalize, cfg.routed_scaling_factor, idx + t * K,
          weights + t * K);
}

int64_t MoeForward(const ModelConfig& cfg, int64_t layer, const MoeWeights& w, ExpertSource& experts,
                const float* x, int64_t T, float* out, int32_t* topk_out, const ExpertHint* hint) {
  const int64_t H = cfg.hidden_size, E = cfg.num_experts, K = cfg.top_k;
  const int64_t L = cfg.latent_size, I = cfg.moe_intermediate_size;

  // 1-3. router on the full-width x.
  std::vector<float> logits(static_cast<size_t>(T * E)), weight(static_cast<size_t>(T * K));
  std::vector<int32_t> idx(static_cast<size_t>(T * K));
  RouteTokens(cfg, w, x, T, logits.data(), idx.data(), weight.data());
  if (topk_out) std::copy(idx.begin(), idx.end(), topk_out);

  // 5a. group (token, rank) slots by expert and ask for the experts at once: the latent
  // down-projection and the shared experts below do not need them, so they run while a
  // streaming source reads (same arithmetic, only earlier).
  std::vector<std::vector<int64_t>> slots(static_cast<size_t>(E));
  std::vector<int32_t> wanted;
  for (int64_t s = 0; s < T * K; ++s) {
    auto& v = slots[static_cast<size_t>(idx[s])];
    if (v.empty()) wanted.push_back(idx[s]);
    v.push_back(s);
  }
  experts.Request(layer, wanted);
  if (hint) experts.Hint(hint->layer, hint->experts);

  // 4. latent down-projection; 8 (computed early). shared experts on the full x, unweighted.
  std::vector<float> xl(static_cast<size_t>(T * L));
  TrunkMatmul(w.trunk, TensorRole::kMoeLatentDown, w.down_lat, x, T, xl.data());
  std::vector<float> shared(static_cast<size_t>(T * H));
  FfnForward(cfg, w.shared, x, T, shared.data());

  // 5b. one MXFP4 matmul per expert over its rows, in arrival order.
  std::vector<float> yk(static_cast<size_t>(T * K * L));  // expert output per (token, rank)
  std::vector<float> X, A, B, Y;
  std::vector<char> done(static_cast<size_t>(E), 0);
  const auto mxfp4 = cfg.expert_inputs_bf16 ? kern::MatmulMxfp4Bf16In : kern::MatmulMxfp4;
  for (size_t n = 0; n < wanted.size(); ++n) {
    const int32_t e = experts.NextReady(layer);
    // A source that hands out an unrequested or repeated expert would corrupt the sum.
    if (e < 0 || e >= E || slots[static_cast<size_t>(e)].empty() || done[static_cast<size_t>(e)])
      throw RuntimeFailure("layer " + std::to_string(layer) + ": expert source returned expert " +
                           std::to_string(e) + " which was not pending");
    done[static_cast<size_t>(e)] = 1;
    const ExpertWeights ew = experts.Acquire(layer, e);
    const auto& rows = slots[static_cast<size_t>(e)];
    // Its rows kRowTile at a time: a chunk whose every token picks this expert (a repeated
    // prompt) keeps these buffers bounded; rows are independent, so the bits do not change.
    for (size_t r0 = 0; r0 < rows.size(); r0 += static_cast<size_t>(kRowTile)) {
      const int64_t R = std::min<int64_t>(kRowTile, static_cast<int64_t>(rows.size() - r0));
      const int64_t* tile = rows.data() + r0;
      X.resize(static_cast<size_t>(R * L));
      A.resize(static_cast<size_t>(R * I));
      B.resize(static_cast<size_t>(R * I));
      Y.resize(static_cast<size_t>(R * L));
      for (int64_t r = 0; r < R; ++r)
        std::memcpy(X.data() + r * L, xl.data() + (tile[r] / K) * L, static_cast<size_t>(L) * 4);
      mxfp4(ew.w1, X.data(), R, A.data());
      mxfp4(ew.w3, X.data(), R, B.data());
      for (int64_t r = 0; r < R; ++r)
        SituGlu(A.data() + r * I, B.data() + r * I, I, cfg.situ_beta, cfg.situ_linear_beta,
                cfg.situ_linear_capped, A.data() + r * I);
      mxfp4(ew.w2, A.data(), R, Y.data());
      for (int64_t r = 0; r < R; ++r)
        std::memcpy(yk.data() + tile[r] * L, Y.data() + r * L, static_cast<size_t>(L) * 4);
    }
    experts.Release(layer, e);
  }

  // Weighted sum in top-k rank order (whatever the arrival order), 6. norm of the SUM.
  std::vector<float> ylat(static_cast<size_t>(T * L));
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < T; ++t) {
    float* yt = ylat.data() + t * L;
    for (int64_t d = 0; d < L; ++d) {
      double acc = 0;
      for (int64_t j = 0; j < K; ++j)
        acc += static_cast<double>(weight[t * K + j]) * yk[(t * K + j) * L + d];
      yt[d] = static_cast<float>(acc);
    }
    RmsNorm(yt, w.lat_norm.data(), L, cfg.rms_norm_eps, yt);
  }

  // 7. latent up, 8. plus the shared experts.
  TrunkMatmul(w.trunk, TensorRole::kMoeLatentUp, w.up_lat, ylat.data(), T, out);
  for (int64_t i = 0; i < T * H; ++i) out[i] += shared[i];
  return static_cast<int64_t>(wanted.size());
}

}  // namespace k3::compute
