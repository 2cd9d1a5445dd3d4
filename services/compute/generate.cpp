#include "generate.h"

#include <algorithm>
#include <chrono>

namespace k3::compute {

int32_t Argmax(const float* v, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i)
    if (v[i] > v[best]) best = i;  // strict: ties keep the lowest id
  return static_cast<int32_t>(best);
}

GreedyResult RunGreedy(Forward& fwd, int64_t V, const GreedyParams& p, const GreedyHooks& hooks) {
  using Clock = std::chrono::steady_clock;
  auto since = [](Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); };
  std::vector<float> logits(static_cast<size_t>(V));
  std::vector<float> chunk_logits;

  // Feeds `ids` in chunks from the current state; leaves the last position's logits.
  auto prefill = [&](const std::vector<int32_t>& ids, bool first_pass) {
    const int64_t n = static_cast<int64_t>(ids.size());
    for (int64_t s = 0; s < n; s += p.prefill_chunk) {
      const int64_t T = std::min(p.prefill_chunk, n - s);
      if (first_pass && p.all_positions) {
        chunk_logits.resize(static_cast<size_t>(T * V));
        fwd.Run(ids.data() + s, T, true, chunk_logits.data(), p.tracer);
        if (hooks.on_prompt_chunk) hooks.on_prompt_chunk(chunk_logits.data(), T);
        std::copy(chunk_logits.end() - V, chunk_logits.end(), logits.begin());
      } else {
        fwd.Run(ids.data() + s, T, false, logits.data(), nullptr);
      }
      if (first_pass && hooks.on_prefill_progress) hooks.on_prefill_progress(s + T, n);
    }
  };

  GreedyResult r;
  const auto t0 = Clock::now();
  prefill(p.ids, true);
  r.prefill_seconds = since(t0);
  if (hooks.after_prefill) hooks.after_prefill(logits.data());

  r.full = p.ids;
  const auto t1 = Clock::now();
  for (int64_t i = 0; i < p.gen; ++i) {
    const int32_t next = Argmax(logits.data(), V);
    r.generated.push_back(next);
    r.full.push_back(next);
    if (hooks.on_token) hooks.on_token(next, i);
    if (i + 1 == p.gen) break;
    const auto ts = Clock::now();
    if (p.full_recompute) {
      fwd.Reset();
      prefill(r.full, false);
    } else {
      fwd.Run(&next, 1, false, logits.data(), nullptr);
    }
    r.token_seconds.push_back(since(ts));
  }
  r.decode_seconds = p.gen > 1 ? since(t1) : 0.0;
  r.seconds_per_token = p.gen > 1 ? r.decode_seconds / static_cast<double>(p.gen - 1) : r.prefill_seconds;
  return r;
}

}  // namespace k3::compute
