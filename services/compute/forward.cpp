#include "forward.h"

#include <cstdio>
#include <vector>

#include "../../common/error.h"
#include "mixers.h"
#include "ops.h"

namespace k3::compute {

namespace {

using Buf = std::vector<float>;

// AR over the token's snapshots B[0..n) plus the running sum P, for every token of the chunk.
void AttnResChunk(const std::vector<Buf>& B, const float* P, const std::vector<float>& fold,
                  int64_t T, int64_t H, double eps, float* y) {
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < T; ++t) {
    std::vector<const float*> c;
    for (const Buf& b : B) c.push_back(b.data() + t * H);
    c.push_back(P + t * H);
    AttnRes(c.data(), static_cast<int>(c.size()), fold.data(), H, eps, y + t * H);
  }
}

void RmsChunk(const float* x, const std::vector<float>& w, int64_t T, int64_t H, double eps,
              float* y) {
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < T; ++t) RmsNorm(x + t * H, w.data(), H, eps, y + t * H);
}

std::string LayerFile(int64_t l, const char* what) {
  char b[64];
  std::snprintf(b, sizeof b, "layer%03lld.%s", static_cast<long long>(l), what);
  return b;
}

}  // namespace

Forward::Forward(const ModelConfig& cfg, const GlobalWeights& globals, LayerSource& layers,
                 ExpertSource& experts, HeadSource* head)
    : cfg_(cfg), g_(globals), layers_(layers), experts_(experts), head_(head) {
  state_.Reset(cfg_);
}

void Forward::Reset() {
  state_.Reset(cfg_);
  torn_ = false;
  journal_.open = false;
}

void Forward::BeginVerify() {
  journal_.open = true;
  journal_.T = 0;
  journal_.position = state_.position;
  journal_.kda.resize(state_.kda.size());
  for (KdaJournal& j : journal_.kda) j.recorded = false;
  journal_.mla_len.resize(state_.mla.size());
  for (size_t l = 0; l < state_.mla.size(); ++l) journal_.mla_len[l] = state_.mla[l].len;
}

void Forward::KeepFirst(int64_t keep) {
  if (!journal_.open) throw RuntimeFailure("forward: KeepFirst without a verify pass");
  if (keep < 0 || keep > journal_.T) throw RuntimeFailure("forward: KeepFirst beyond the verify pass");
  journal_.open = false;
  for (size_t l = 0; l < state_.kda.size(); ++l)
    if (cfg_.layer_kind[l] == MixerKind::KDA) KdaKeepFirst(cfg_, state_.kda[l], journal_.kda[l], keep);
  for (size_t l = 0; l < state_.mla.size(); ++l) {
    if (cfg_.layer_kind[l] == MixerKind::KDA) continue;
    MlaCache& m = state_.mla[l];
    const int64_t len = journal_.mla_len[l] + keep;
    if (m.len == len) continue;
    // Rows are appended in order; the rows past `len` belong to rejected tokens.
    m.len = len;
    m.c.resize(static_cast<size_t>(len * cfg_.kv_lora_rank));
    m.kpe.resize(static_cast<size_t>(len * cfg_.qk_rope_head_dim));
  }
  state_.position = journal_.position + keep;
}

int64_t Forward::journal_bytes() const {
  int64_t n = 0;
  for (const KdaJournal& j : journal_.kda) n += j.bytes();
  return n;
}

void Forward::Run(const int32_t* ids, int64_t T, bool all_positions, float* logits,
                  Tracer* trace) {
  if (T <= 0) throw RuntimeFailure("forward: empty chunk");
  const int64_t H = cfg_.hidden_size;
  const double eps = cfg_.rms_norm_eps;
  const size_t TH = static_cast<size_t>(T * H);
  const int64_t F = sizeof(float);

  Buf P(TH);  // running sum; starts as the embedding
  if (head_) head_->Embed(ids, T, P.data());
  else
    for (int64_t t = 0; t < T; ++t) kern::RowToFloat(g_.embed, ids[t], P.data() + t * H);
  if (trace) trace->Append("embed.f32", P.data(), T * H * F);

  std::vector<Buf> B;  // block snapshots, per token
  Buf a(TH), x(TH), o(TH);
  std::vector<int32_t> topk(static_cast<size_t>(T * cfg_.top_k));
  torn_ = true;  // until every layer has consumed the chunk
  for (int64_t l = 0; l < cfg_.num_layers; ++l) {
    const LayerWeights& w = layers_.Acquire(l);
    if (B.empty()) {
      a = P;
    } else {
      AttnResChunk(B, P.data(), w.attn_res_fold, T, H, eps, a.data());
    }
    const bool fresh = cfg_.is_block_start(l);
    if (fresh) B.push_back(std::move(P));  // snapshot before this layer; P ← ∅
    RmsChunk(a.data(), w.in_norm, T, H, eps, x.data());
    if (w.kind == MixerKind::KDA) {
      KdaForward(cfg_, w.kda, state_.kda[static_cast<size_t>(l)], x.data(), T, o.data(),
                 journal_.open ? &journal_.kda[static_cast<size_t>(l)] : nullptr);
    } else {
      MlaForward(cfg_, w.mla, state_.mla[static_cast<size_t>(l)], x.data(), T, o.data());
    }
    if (trace) trace->Append(LayerFile(l, "mixer.f32"), o.data(), T * H * F);
    if (fresh) {
      P = o;
    } else {
      for (size_t i = 0; i < TH; ++i) P[i] += o[i];
    }
    AttnResChunk(B, P.data(), w.mlp_res_fold, T, H, eps, a.data());
    RmsChunk(a.data(), w.post_norm, T, H, eps, x.data());
    ExpertHint hint;
    if (hints_on_ && T == 1 && l + 1 < cfg_.num_layers && !cfg_.is_dense(l + 1))
      if (const LayerWeights* next = layers_.Peek(l + 1)) {
        hint.layer = l + 1;
        hint.experts = hints_.Guess(cfg_, l + 1, *next, a.data());
      }
    if (w.dense) {
      if (hint.layer >= 0) experts_.Hint(hint.layer, hint.experts);
      FfnForward(cfg_, w.dense_ffn, x.data(), T, o.data());
    } else {
      MoeForward(cfg_, l, w.moe, experts_, x.data(), T, o.data(), topk.data(), hint.layer >= 0 ? &hint : nullptr);
      if (T == 1) hints_.Score(l, topk.data(), cfg_.top_k);
    }
    layers_.Release(l);
    for (size_t i = 0; i < TH; ++i) P[i] += o[i];
    if (trace) {
      trace->Append(LayerFile(l, "ffn.f32"), o.data(), T * H * F);
      if (!w.dense)
        trace->Append(LayerFile(l, "topk.i32"), topk.data(), T * cfg_.top_k * 4);
      trace->Append(LayerFile(l, "out.f32"), P.data(), T * H * F);
    }    // Safe point: nothing is held (the layer and its experts are released).
    if (stop_check_ && stop_check_()) throw StopAtSafePoint{};
  }
  state_.position += T;
  torn_ = false;
  if (journal_.open) journal_.T = T;

  // Model output: AttnRes over the snapshots and h, final norm, lm_head.
  AttnResChunk(B, P.data(), g_.out_res_fold, T, H, eps, a.data());
  RmsChunk(a.data(), g_.final_norm, T, H, eps, x.data());
  if (trace) trace->Append("final.f32", x.data(), T * H * F);
  if (!logits) return;
  if (all_positions) {
    if (head_) head_->Logits(x.data(), T, logits);
    else kern::Matmul(g_.lm_head, x.data(), T, logits);
    if (trace) trace->Append("logits.f32", logits, T * cfg_.vocab_size * F);
  } else {
    if (head_) head_->Logits(x.data() + (T - 1) * H, 1, logits);
    else kern::Matmul(g_.lm_head, x.data() + (T - 1) * H, 1, logits);
  }
}

}  // namespace k3::compute
