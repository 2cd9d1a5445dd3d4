// The generation loop (greedy by default, else sampler.h) shared by the standalone and pipeline modes of k3-compute:
// the prompt in chunks, then one token at a time (or the whole prefix again with
// full_recompute). Callers observe it through hooks; the loop itself never differs.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "forward.h"
#include "sampler.h"
#include "speculate.h"

namespace k3::compute {

struct GreedyParams {
  std::vector<int32_t> ids;
  int64_t gen = 8;
  bool full_recompute = false;
  int64_t prefill_chunk = 64;
  std::vector<int32_t> stop_ids;  // generation ends after emitting one of these
  int64_t max_positions = 0;      // > 0: prompt + generated ids never exceed it (the context)
  bool all_positions = false;  // first prompt pass keeps every position's logits (hook below)
  Tracer* tracer = nullptr;    // first prompt pass only
  SamplingParams sampling;     // how each token is chosen (sampler.h); default greedy
  std::vector<int32_t> prior;  // the sequence's ids consumed before `ids` (a kept or loaded state)
  TokenChooser choose;         // picks each token (speculate.h); empty: the sampler with `sampling`
  int64_t spec = 0;            // n-gram drafts per verify pass (speculate.h); 0: one token per step
  // Ascending, each 0 < mark < ids.size(): the prompt pass ends a chunk after ids[0..mark) and
  // calls hooks.at_mark(mark) there (compute snapshots the sequence for its prefix cache and
  // store). Chunk boundaries never change the bits, so neither do the marks.
  std::vector<int64_t> marks;
};

struct GreedyHooks {
  std::function<void(const float* logits, int64_t T)> on_prompt_chunk;  // all_positions only
  std::function<void(int64_t done, int64_t total)> on_prefill_progress;  // first pass
  std::function<void(const float* logits)> after_prefill;  // logits choosing the first token
  std::function<void(int64_t mark)> at_mark;  // the state has consumed exactly p.ids[0..mark)
  // The raw logits that chose generated token `index` (before on_token): logprobs.
  std::function<void(const float* logits, int32_t id, int64_t index)> on_chosen;
  std::function<void(int32_t id, int64_t index)> on_token;
  // Asked between tokens (the forward pass asks between layers through Forward::SetStopCheck);
  // true ends the request at that point with what was generated so far.
  std::function<bool()> should_stop;
  // Asked between tokens after should_stop, and between prompt chunks: true ends the request
  // (Ending::kCancelled) with what was generated so far (compute: a Cancel for this request
  // arrived). Between prompt chunks, GreedyResult.full keeps only the prompt ids fed.
  std::function<bool()> cancelled;
};

// Why a generation ended (compute.fbs StopReason mirrors it).
// kLength: p.gen tokens, or the context (max_positions) is full.
enum class Ending { kLength, kStopId, kInterrupted, kCancelled };

struct GreedyResult {
  std::vector<int32_t> generated, full;
  double prefill_seconds = 0, decode_seconds = 0, seconds_per_token = 0;
  std::vector<double> token_seconds;  // wall time of each decode step (gen - 1 of them)
  Ending ending = Ending::kLength;
  bool prefill_done = false;  // false: stopped during the prompt pass (no logits, no token)
  int64_t spec_drafted = 0, spec_accepted = 0;  // drafts verified, and of them emitted
};

// The end of the prompt chunk that starts at `start` (of `n` ids): start + chunk, or n, or the
// first mark inside, whichever comes first.
int64_t ChunkEnd(int64_t start, int64_t chunk, int64_t n, const std::vector<int64_t>& marks);

// Strict argmax: ties keep the lowest id.
int32_t Argmax(const float* v, int64_t n);

// Runs the prompt then up to p.gen tokens (fewer when p.max_positions leaves less room; the
// caller refuses a prompt longer than max_positions; p.spec > 0: several per forward pass, the
// same ids; ignored with full_recompute; token_seconds then holds each token's share of its
// pass). A StopAtSafePoint from the forward pass or
// hooks.should_stop() ends it early with ending = kInterrupted; the ids produced until then
// are exactly those of an uninterrupted run.
GreedyResult RunGreedy(Forward& fwd, int64_t vocab, const GreedyParams& p, const GreedyHooks& hooks);

}  // namespace k3::compute
