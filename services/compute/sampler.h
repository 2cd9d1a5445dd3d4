// Token choice: a pure function of (raw logits, the sequence's ids so far, how many of them this
// request generated, the sampling parameters). The random draw comes from a counter-based
// generator keyed by (seed, absolute position), and all arithmetic runs in one fixed order (no
// threads, a sort with a total order), so the same inputs give the same id on every run, budget,
// I/O backend, thread count and expert source. docs/sampling.md describes the algorithm.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "common/ipc/messages.h"

namespace k3::compute {

using SamplingParams = ipc::compute::Sampling;  // defaults: greedy, penalties off

// True when the parameters leave the raw logits unchanged and choose their argmax.
bool IsGreedy(const SamplingParams& s);

// Chooses the token at absolute position ids.size(). `ids` is the whole sequence so far (prompt
// and generated); its last `generated` entries are this request's generated ids (the presence and
// frequency penalties count those; repeat_penalty looks at the last repeat_last_n of `ids`).
// Temperature 0 takes the argmax of the (penalised) logits, ties to the lowest id; with the
// penalties off that is exactly Argmax(logits).
int32_t SampleToken(const float* logits, int64_t vocab, std::span<const int32_t> ids, int64_t generated,
                    const SamplingParams& s);

// Uniform double in [0, 1) from (seed, position): SplitMix64-style mixing, 53 bits.
double UniformAt(uint64_t seed, uint64_t position);

// Log-softmax of raw logits, accumulated in double in id order.
struct Logprobs {
  double logprob = 0;                                  // of the chosen id
  std::vector<std::pair<int32_t, double>> top;         // the n most likely ids, ties to the lowest id
};
Logprobs TokenLogprobs(const float* logits, int64_t vocab, int32_t chosen, int32_t n);

// log(sum(exp(logits))) in double, max-shifted, summed in id order.
double LogSumExp(const float* logits, int64_t vocab);

// Teacher-forced scoring of a prompt fed in chunks (GreedyParams.all_positions): row t of each
// chunk predicts the prompt id after it; the last prompt position predicts nothing. Chunks must
// arrive in order, covering the prompt once.
struct PromptScorer {
  std::span<const int32_t> ids;  // the prompt
  int64_t next = 0;              // prompt index of the next chunk's first row
  int64_t scored = 0;            // positions scored so far
  double nll_sum = 0;            // sum of -log p(next prompt id), in double, in position order
  void Chunk(const float* logits, int64_t rows, int64_t vocab);
};

}  // namespace k3::compute
