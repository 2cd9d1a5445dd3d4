#include "ops.h"

#include <omp.h>

#include <cmath>
#include <vector>

namespace k3::compute {

namespace {
double SigmoidD(double x) { return 1.0 / (1.0 + std::exp(-x)); }
}  // namespace

void RmsNorm(const float* x, const float* w, int64_t n, double eps, float* y) {
  double ss = 0;
  for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
  const double inv = 1.0 / std::sqrt(ss / static_cast<double>(n) + eps);
  for (int64_t i = 0; i < n; ++i) {
    const double v = x[i] * inv;
    y[i] = static_cast<float>(w ? v * w[i] : v);
  }
}

void L2Norm(const float* x, int64_t n, double eps, float* y) {
  double ss = 0;
  for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
  const double inv = 1.0 / std::sqrt(ss + eps);
  for (int64_t i = 0; i < n; ++i) y[i] = static_cast<float>(x[i] * inv);
}

void SituGlu(const float* a, const float* b, int64_t n, double beta1, double beta2, bool cap_up,
             float* y) {
  // Three libm calls per element (~60 ns): a one-token decode step runs ~200k of them on the
  // real geometry, between the expert products, so large rows are split over the threads
  // (element-wise, so the result does not change). Inside a parallel region it stays serial.
#pragma omp parallel for schedule(static) if (n >= 1024 && !omp_in_parallel())
  for (int64_t i = 0; i < n; ++i) {
    const double av = a[i], bv = b[i];
    const double gate = beta1 * std::tanh(av / beta1) * SigmoidD(av);
    const double up = cap_up ? beta2 * std::tanh(bv / beta2) : bv;
    y[i] = static_cast<float>(gate * up);
  }
}

void AttnRes(const float* const* cands, int m, const float* w_fold, int64_t n, double eps,
             float* y) {
  // The score uses the unweighted key norm folded with w_fold: Σ key·w = (Σ v·w) / rms(v).
  std::vector<double> score(static_cast<size_t>(m));
  double mx = -INFINITY;
  for (int i = 0; i < m; ++i) {
    double ss = 0, dot = 0;
    for (int64_t d = 0; d < n; ++d) {
      const double v = cands[i][d];
      ss += v * v;
      dot += v * w_fold[d];
    }
    score[i] = dot / std::sqrt(ss / static_cast<double>(n) + eps);
    if (score[i] > mx) mx = score[i];
  }
  double sum = 0;
  for (int i = 0; i < m; ++i) {
    score[i] = std::exp(score[i] - mx);
    sum += score[i];
  }
  for (int i = 0; i < m; ++i) score[i] /= sum;
  for (int64_t d = 0; d < n; ++d) {
    double acc = 0;
    for (int i = 0; i < m; ++i) acc += score[i] * cands[i][d];
    y[d] = static_cast<float>(acc);
  }
}

void ShortConv(const float* taps, int K, float* state, const float* u, int64_t T, int64_t ldu,
               int64_t c0, int64_t c1, float* out) {
  const int S = K - 1;
  for (int64_t c = c0; c < c1; ++c) {
    const float* w = taps + c * K;
    float* st = state + c * S;
    for (int64_t t = 0; t < T; ++t) {
      const float cur = u[t * ldu + c];
      double acc = 0;
      for (int j = 0; j < S; ++j) acc += static_cast<double>(w[j]) * st[j];
      acc += static_cast<double>(w[S]) * cur;
      out[t * ldu + c] = static_cast<float>(acc * SigmoidD(acc));
      // Shift the window: drop the oldest, append the current pre-conv input.
      for (int j = 0; j + 1 < S; ++j) st[j] = st[j + 1];
      if (S > 0) st[S - 1] = cur;
    }
  }
}

void KdaGate(const float* a_log, const float* z, const float* dt_bias, int64_t H, int64_t D,
             double lower, float* g) {
  for (int64_t h = 0; h < H; ++h) {
    const double a = std::exp(static_cast<double>(a_log[h]));
    for (int64_t d = 0; d < D; ++d) {
      const int64_t i = h * D + d;
      const double uval = a * (static_cast<double>(z[i]) + dt_bias[i]);
      g[i] = static_cast<float>(lower * SigmoidD(uval));
    }
  }
}

void KdaStep(float* S, int64_t D, const float* q, const float* k, const float* v,
             const float* alpha, float beta, float* o) {
  // decay
  for (int64_t i = 0; i < D; ++i) {
    float* row = S + i * D;
    const float a = alpha[i];
    for (int64_t j = 0; j < D; ++j) row[j] *= a;
  }
  // read r = Sᵀk, then the write delta β(v − r); the i-outer order vectorises over j.
  float r[512];
  float* rp = D <= 512 ? r : new float[static_cast<size_t>(D)];
  for (int64_t j = 0; j < D; ++j) rp[j] = 0;
  for (int64_t i = 0; i < D; ++i) {
    const float* row = S + i * D;
    const float ki = k[i];
    for (int64_t j = 0; j < D; ++j) rp[j] += ki * row[j];
  }
  for (int64_t j = 0; j < D; ++j) rp[j] = beta * (v[j] - rp[j]);
  for (int64_t i = 0; i < D; ++i) {
    float* row = S + i * D;
    const float ki = k[i];
    for (int64_t j = 0; j < D; ++j) row[j] += ki * rp[j];
  }
  // output from the updated state
  for (int64_t j = 0; j < D; ++j) o[j] = 0;
  for (int64_t i = 0; i < D; ++i) {
    const float* row = S + i * D;
    const float qi = q[i];
    for (int64_t j = 0; j < D; ++j) o[j] += qi * row[j];
  }
  if (rp != r) delete[] rp;
}

void GatedRmsNorm(const float* o, const float* w, const float* gate, int64_t D, double eps,
                  float* y) {
  double ss = 0;
  for (int64_t i = 0; i < D; ++i) ss += static_cast<double>(o[i]) * o[i];
  const double inv = 1.0 / std::sqrt(ss / static_cast<double>(D) + eps);
  for (int64_t i = 0; i < D; ++i)
    y[i] = static_cast<float>(o[i] * inv * w[i] * SigmoidD(gate[i]));
}

void Route(const float* logits, const float* bias, int64_t E, int64_t K, bool renormalize,
           double scaling, int32_t* idx, float* weights) {
  std::vector<double> s(static_cast<size_t>(E));
  std::vector<char> taken(static_cast<size_t>(E), 0);
  for (int64_t e = 0; e < E; ++e) s[e] = SigmoidD(logits[e]);
  // K passes of an argmax: K ≤ 16, E ≤ 896, and a strict '>' keeps the lowest id on ties.
  for (int64_t j = 0; j < K; ++j) {
    int64_t best = -1;
    double bv = 0;
    for (int64_t e = 0; e < E; ++e) {
      if (taken[e]) continue;
      const double v = s[e] + (bias ? bias[e] : 0.0);
      if (best < 0 || v > bv) {
        best = e;
        bv = v;
      }
    }
    taken[best] = 1;
    idx[j] = static_cast<int32_t>(best);
  }
  double sum = 0;
  for (int64_t j = 0; j < K; ++j) sum += s[idx[j]];
  for (int64_t j = 0; j < K; ++j) {
    const double w = renormalize ? s[idx[j]] / (sum + 1e-20) : s[idx[j]];
    weights[j] = static_cast<float>(w * scaling);
  }
}

void Softmax(float* s, int64_t n) {
  float mx = -INFINITY;
  for (int64_t i = 0; i < n; ++i) mx = s[i] > mx ? s[i] : mx;
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double e = std::exp(static_cast<double>(s[i]) - mx);
    s[i] = static_cast<float>(e);
    sum += e;
  }
  const double inv = 1.0 / sum;
  for (int64_t i = 0; i < n; ++i) s[i] = static_cast<float>(s[i] * inv);
}

void MlaAttendHead(const float* q_nope, const float* q_pe, int64_t nope, int64_t rope,
                   const float* k_nope, int64_t ld_k, const float* k_pe, int64_t ld_pe,
                   const float* v, int64_t ld_v, int64_t vdim, int64_t S, double scale,
                   float* scratch_S, float* out) {
  for (int64_t s = 0; s < S; ++s) {
    double dot = 0;
    for (int64_t d = 0; d < nope; ++d) dot += static_cast<double>(q_nope[d]) * k_nope[s * ld_k + d];
    for (int64_t d = 0; d < rope; ++d) dot += static_cast<double>(q_pe[d]) * k_pe[s * ld_pe + d];
    scratch_S[s] = static_cast<float>(dot * scale);
  }
  Softmax(scratch_S, S);
  for (int64_t d = 0; d < vdim; ++d) {
    double acc = 0;
    for (int64_t s = 0; s < S; ++s) acc += static_cast<double>(scratch_S[s]) * v[s * ld_v + d];
    out[d] = static_cast<float>(acc);
  }
}

}  // namespace k3::compute
