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

int64_t ChunkEnd(int64_t start, int64_t chunk, int64_t n, const std::vector<int64_t>& marks) {
  int64_t end = std::min(start + chunk, n);
  for (int64_t m : marks)
    if (m > start && m < end) return m;  // ascending: the first inside
  return end;
}

GreedyResult RunGreedy(Forward& fwd, int64_t V, const GreedyParams& p, const GreedyHooks& hooks) {
  using Clock = std::chrono::steady_clock;
  auto since = [](Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); };
  std::vector<float> logits(static_cast<size_t>(V));
  std::vector<float> chunk_logits;

  // A Cancel seen between two prompt chunks (a chunk boundary is a safe point): the ids fed
  // so far stay in the sequence, the rest of the prompt is dropped.
  struct PromptCancelled {
    int64_t fed;
  };
  // Feeds `ids` in chunks from the current state; leaves the last position's logits.
  auto prefill = [&](const std::vector<int32_t>& ids, bool first_pass) {
    const int64_t n = static_cast<int64_t>(ids.size());
    for (int64_t s = 0, T = 0; s < n; s += T) {
      T = (first_pass ? ChunkEnd(s, p.prefill_chunk, n, p.marks) : std::min(s + p.prefill_chunk, n)) - s;
      if (first_pass && p.all_positions) {
        chunk_logits.resize(static_cast<size_t>(T * V));
        fwd.Run(ids.data() + s, T, true, chunk_logits.data(), p.tracer);
        if (hooks.on_prompt_chunk) hooks.on_prompt_chunk(chunk_logits.data(), T);
        std::copy(chunk_logits.end() - V, chunk_logits.end(), logits.begin());
      } else {
        fwd.Run(ids.data() + s, T, false, logits.data(), nullptr);
      }
      if (first_pass && s + T < n && hooks.at_mark && std::binary_search(p.marks.begin(), p.marks.end(), s + T))
        hooks.at_mark(s + T);
      if (first_pass && hooks.on_prefill_progress) hooks.on_prefill_progress(s + T, n);
      if (first_pass && s + T < n && hooks.cancelled && hooks.cancelled()) throw PromptCancelled{s + T};
    }
  };

  if (p.max_positions > 0) fwd.ReserveContext(p.max_positions);
  GreedyResult r;
  r.full = p.ids;
  auto stop_now = [&] { return hooks.should_stop && hooks.should_stop(); };
  const auto t0 = Clock::now();
  try {
    prefill(p.ids, true);
  } catch (const StopAtSafePoint&) {
    r.prefill_seconds = since(t0);
    r.ending = Ending::kInterrupted;
    return r;
  } catch (const PromptCancelled& c) {
    r.prefill_seconds = since(t0);
    r.ending = Ending::kCancelled;
    r.full.resize(static_cast<size_t>(c.fed));
    return r;
  }
  r.prefill_seconds = since(t0);
  r.prefill_done = true;
  if (hooks.after_prefill) hooks.after_prefill(logits.data());

  int64_t gen = p.gen;
  if (p.max_positions > 0)
    gen = std::min(gen, std::max<int64_t>(0, p.max_positions - fwd.position()));  // the whole sequence so far
  // The chooser sees the whole sequence (a kept state's ids first): the sampler's position, the
  // key of its draws, is absolute, so a continued sequence draws what one run of it would.
  std::vector<int32_t> seq = p.prior;
  seq.insert(seq.end(), r.full.begin(), r.full.end());
  const size_t before_generation = seq.size();
  const TokenChooser choose =
      p.choose ? p.choose : [&](const float* l, const std::vector<int32_t>& ids) {
        return SampleToken(l, V, ids, static_cast<int64_t>(ids.size() - before_generation), p.sampling);
      };
  const bool speculate = p.spec > 0 && !p.full_recompute;
  Speculator spec(fwd, V, p.spec, choose);
  const auto t1 = Clock::now();
  auto t_last = t1;  // end of the last completed decode step
  for (int64_t i = 0; i < gen; ++i) {
    const float* chose_with = logits.data();  // the logits that choose `next`
    int32_t next;
    if (spec.pending()) {  // chosen by the last verify pass
      const SpecToken t = spec.Pop();
      next = t.id;
      chose_with = t.logits;
      r.token_seconds.push_back(t.seconds);
    } else {
      next = choose(chose_with, seq);
    }
    if (hooks.on_chosen) hooks.on_chosen(chose_with, next, i);
    r.generated.push_back(next);
    r.full.push_back(next);
    seq.push_back(next);
    if (hooks.on_token) hooks.on_token(next, i);
    if (std::find(p.stop_ids.begin(), p.stop_ids.end(), next) != p.stop_ids.end()) {
      r.ending = Ending::kStopId;
      break;
    }
    if (i + 1 == gen) break;
    if (stop_now()) {
      r.ending = Ending::kInterrupted;
      break;
    }
    if (hooks.cancelled && hooks.cancelled()) {
      r.ending = Ending::kCancelled;
      break;
    }
    const auto ts = Clock::now();
    try {
      if (p.full_recompute) {
        fwd.Reset();
        prefill(r.full, false);
      } else if (speculate) {
        if (!spec.pending()) spec.Step(seq, gen - (i + 1), p.stop_ids);
        t_last = Clock::now();
        continue;  // each token's time is pushed as it is popped
      } else {
        fwd.Run(&next, 1, false, logits.data(), nullptr);
      }
    } catch (const StopAtSafePoint&) {
      r.ending = Ending::kInterrupted;
      break;
    }
    r.token_seconds.push_back(since(ts));
    t_last = Clock::now();
  }
  spec.Settle();  // the state keeps what was emitted (all but the last token fed)
  r.spec_drafted = spec.drafted();
  r.spec_accepted = spec.accepted();
  // Per-token figures over the completed decode steps only (a stop can cut the last one short).
  const auto steps = static_cast<int64_t>(r.token_seconds.size());
  r.decode_seconds = steps > 0 ? std::chrono::duration<double>(t_last - t1).count() : 0.0;
  r.seconds_per_token = steps > 0 ? r.decode_seconds / static_cast<double>(steps) : r.prefill_seconds;
  return r;
}

}  // namespace k3::compute
