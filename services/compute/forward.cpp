#include "forward.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "common/error.h"
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
  torn_ = true;  // until every layer has consumed the chunk
  Pass({Segment{&state_, ids, T, all_positions, logits}}, trace, journal_.open);
}

void Forward::RunBatch(const std::vector<Segment>& segments) {
  if (segments.empty()) throw RuntimeFailure("forward: empty batch");
  for (size_t i = 0; i < segments.size(); ++i) {
    const Segment& s = segments[i];
    if (s.T <= 0 || !s.state || !s.ids) throw RuntimeFailure("forward: empty batch segment");
    if (s.state == &state_) throw RuntimeFailure("forward: a batch segment uses the forward's own state");
    for (size_t j = 0; j < i; ++j)
      if (segments[j].state == s.state) throw RuntimeFailure("forward: two batch segments share one state");
  }
  Pass(segments, nullptr, false);
}

void Forward::Pass(const std::vector<Segment>& segs, Tracer* trace, bool journal) {
  const auto t0 = std::chrono::steady_clock::now();
  struct Observe {  // on every return of a completed pass (not on a stop)
    const Forward& f;
    std::chrono::steady_clock::time_point t0;
    int64_t rows = 0;
    bool done = false;
    ~Observe() {
      if (done && f.on_pass_) f.on_pass_(rows, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
  } observe{*this, t0};
  const int64_t H = cfg_.hidden_size;
  const double eps = cfg_.rms_norm_eps;
  const int64_t F = sizeof(float);
  // The stacked rows: segment i owns rows [spans[i].row0, + T).
  std::vector<RowSpan> spans;
  std::vector<int32_t> ids;
  for (const Segment& s : segs) {
    spans.push_back({static_cast<int64_t>(ids.size()), s.T});
    ids.insert(ids.end(), s.ids, s.ids + s.T);
  }
  const int64_t T = static_cast<int64_t>(ids.size());
  observe.rows = T;
  const size_t TH = static_cast<size_t>(T * H);
  std::vector<KdaState*> kda(segs.size());
  std::vector<MlaCache*> mla(segs.size());
  pass_experts_.assign(static_cast<size_t>(cfg_.num_layers), 0);

  Buf P(TH);  // running sum; starts as the embedding
  if (head_) head_->Embed(ids.data(), T, P.data());
  else
    for (int64_t t = 0; t < T; ++t) kern::RowToFloat(g_.embed, ids[t], P.data() + t * H);
  if (trace) trace->Append("embed.f32", P.data(), T * H * F);

  std::vector<Buf> B;  // block snapshots, per token
  Buf a(TH), x(TH), o(TH);
  std::vector<int32_t> topk(static_cast<size_t>(T * cfg_.top_k));
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
    const size_t li = static_cast<size_t>(l);
    if (w.kind == MixerKind::KDA) {
      for (size_t i = 0; i < segs.size(); ++i) kda[i] = &segs[i].state->kda[li];
      KdaForward(cfg_, w.kda, kda, spans, x.data(), T, o.data(), journal ? &journal_.kda[li] : nullptr);
    } else {
      for (size_t i = 0; i < segs.size(); ++i) mla[i] = &segs[i].state->mla[li];
      MlaForward(cfg_, w.mla, mla, spans, x.data(), T, o.data());
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
      pass_experts_[li] =
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
  for (const Segment& s : segs) s.state->position += s.T;
  observe.done = true;
  if (segs[0].state == &state_) {  // Run: the state is whole again (the head reads no state)
    torn_ = false;
    if (journal_.open) journal_.T = T;
  }

  // Model output: AttnRes over the snapshots and h, final norm, lm_head.
  AttnResChunk(B, P.data(), g_.out_res_fold, T, H, eps, a.data());
  RmsChunk(a.data(), g_.final_norm, T, H, eps, x.data());
  if (trace) trace->Append("final.f32", x.data(), T * H * F);
  // lm_head once over the rows that need logits (every row of an all_positions segment, else
  // its last), so a streamed lm_head is read once per pass; then each segment gets its rows.
  std::vector<size_t> pick;
  for (size_t i = 0; i < segs.size(); ++i) {
    if (!segs[i].logits) continue;
    const int64_t first = segs[i].all_positions ? spans[i].row0 : spans[i].row0 + spans[i].T - 1;
    for (int64_t r = first; r < spans[i].row0 + spans[i].T; ++r) pick.push_back(static_cast<size_t>(r));
  }
  if (pick.empty()) return;
  const int64_t R = static_cast<int64_t>(pick.size()), V = cfg_.vocab_size;
  Buf rows(static_cast<size_t>(R * H));
  for (size_t r = 0; r < pick.size(); ++r)
    std::copy(x.begin() + static_cast<std::ptrdiff_t>(pick[r] * H),
              x.begin() + static_cast<std::ptrdiff_t>((pick[r] + 1) * H), rows.begin() + static_cast<std::ptrdiff_t>(r * H));
  const bool one = segs.size() == 1;  // a single segment writes straight into its buffer
  Buf out_all(one ? 0 : static_cast<size_t>(R * V));
  float* out = one ? segs[0].logits : out_all.data();
  if (head_) head_->Logits(rows.data(), R, out);
  else kern::Matmul(g_.lm_head, rows.data(), R, out);
  if (trace && segs[0].all_positions) trace->Append("logits.f32", out, T * V * F);
  if (one) return;
  int64_t at = 0;
  for (const Segment& s : segs) {
    if (!s.logits) continue;
    const int64_t n = s.all_positions ? s.T : 1;
    std::copy(out_all.begin() + at * V, out_all.begin() + (at + n) * V, s.logits);
    at += n;
  }
}

}  // namespace k3::compute
