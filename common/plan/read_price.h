// The price of a token in bytes read from disk, and in seconds at a disk rate, under a memory
// plan (docs/memory-plan.md "Read price"). Pure arithmetic: the dry run, k3-model check and the
// plan's choice of the prefill chunk all use it.
//
// The model of the reads: every pass (a prompt chunk of T tokens, or one generated token)
// reads the streamed trunk once (every layer not pinned, and lm_head when it streams) and, per
// MoE layer, the distinct experts the pass routes to that are not in the expert cache. K3's
// router is trained for flat use (quantile balancing), so T tokens choosing top_k of E experts
// ask for E·(1 − (1 − k/E)^T) distinct experts per layer on average; the cache, holding `slots`
// of all the model's routed experts, is taken to hold that fraction of them.
#pragma once
#include <cstdint>

#include "common/plan/memory_plan.h"

namespace k3::plan {

struct ReadModel {
  int64_t moe_layers = 0;      // layers with routed experts
  int64_t experts = 0;         // routed experts per MoE layer (E)
  int64_t top_k = 0;           // experts per token (k)
  int64_t expert_bytes = 0;    // one routed expert as read (widened to 4096 bounds)
  int64_t expert_slots = 0;    // the expert cache
  int64_t streamed_trunk = 0;  // bytes of trunk read once per pass: unpinned layers, a streamed lm_head
};

// What the plan leaves to read for `model` (pinned layers and lm_head, expert slots).
ReadModel ReadModelOf(const PlanModel& model, const MemoryPlan& plan);

// E·(1 − (1 − k/E)^T): distinct experts T tokens ask for in one MoE layer (k for T = 1).
double DistinctExperts(int64_t experts, int64_t top_k, int64_t tokens);

// Bytes one pass of `tokens` tokens reads: the streamed trunk plus the expert misses.
double PassBytes(const ReadModel& r, int64_t tokens);

struct ReadPrice {
  int64_t chunk = 0;                // the prefill chunk priced
  double per_generated_token = 0;   // bytes: one decode pass
  double per_chunk = 0;             // bytes: one full prefill chunk
  double per_prompt_token = 0;      // per_chunk / chunk
  double experts_per_layer = 0;     // distinct experts a full chunk asks for per MoE layer
};
ReadPrice PriceAt(const ReadModel& r, int64_t chunk);

// Bytes to prefill `prompt_tokens` in chunks of `chunk` (full chunks, then the rest as one pass).
double PromptBytes(const ReadModel& r, int64_t chunk, int64_t prompt_tokens);

// At `bytes_per_second` of disk: seconds per generated token and the time to the first token
// of a `prompt_tokens` prompt (its prefill: the first token comes from its last logits). Reads
// only: compute that does not overlap them adds to both.
struct TimePrice {
  double seconds_per_token = 0;
  double first_token_seconds = 0;
};
TimePrice TimeAt(const ReadModel& r, int64_t chunk, int64_t prompt_tokens, double bytes_per_second);

// "3.2GB/s", "800MB/s", "1.5GiB/s", or bytes per second; UsageError naming --disk-rate otherwise.
double ParseDiskRate(const std::string& text);

}  // namespace k3::plan
