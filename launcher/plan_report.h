// What k3-launch --dry-run (and k3-model check) says about a plan beyond its regions: the
// prefill chunk it chose and the price of a token in bytes read (and in seconds at a disk
// rate), as text lines and as one JSON object (--dry-run --json). Pure: from the plan, the
// model and the options. docs/memory-plan.md "Prefill chunk" and "Read price".
#pragma once
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "common/plan/memory_plan.h"
#include "common/plan/read_price.h"

namespace k3::launch {

struct PriceQuery {
  double disk_rate = 0;     // bytes per second (0: no seconds)
  std::string rate_source;  // "--disk-rate", "probe of N shards", ...
  int64_t prompt_tokens = 0;  // the prompt priced for the time to first token (0: none)
};

// The plan's price, and the same plan at the floor's chunk (what the chunk costs decode).
struct PlanPrice {
  plan::ReadModel read;
  plan::ReadPrice at_chunk;
  int64_t floor_chunk = 0;
  plan::ReadPrice at_floor_chunk;  // MakePlanAtChunk(floor_chunk); equal to at_chunk when the chunks are
  double prompt_bytes = 0;         // PromptBytes of query.prompt_tokens
  plan::TimePrice time;
};
PlanPrice PricePlan(const plan::PlanModel& model, int64_t budget, const plan::PlanOptions& po,
                    const plan::MemoryPlan& p, const PriceQuery& q);

// "1.30 TB", "10.8 GB", "745 MB": decimal units, three significant digits (the prices are estimates).
std::string DecimalBytes(double bytes);

// The dry run's lines on the chunk and the price (each ends in '\n').
std::string ChunkLine(const plan::PlanOptions& po, const plan::MemoryPlan& p);
std::string PriceLines(const plan::MemoryPlan& p, const PlanPrice& price, const PriceQuery& q);

// The coded trunk's size over the bf16 trunk, as measured on trained weights (the demo's, 0.703;
// tests/bench/results/2026-12-02-trunk-codec.md): the dry run's estimate when no coded trunk
// is given (the release here has index and config only).
inline constexpr double kCodedRatioEstimate = 0.70;

// The dry run's coded-trunk line: the plan and the bytes per generated token with the coded
// trunk (model.coded_trunk_bytes, measured) or, without one, estimated at kCodedRatioEstimate
// per layer and labelled so, beside the uncoded numbers; and the same at trunk_piece = layer
// when layers stream in pieces (pieces read the release's bytes, docs/pipeline.md "Coded trunk").
std::string CodedLines(const plan::PlanModel& model, int64_t budget, const plan::PlanOptions& po,
                       const plan::MemoryPlan& p);

// --dry-run --json: the plan's regions and decisions, the chunk and the price.
nlohmann::json PlanJson(const std::string& model_dir, const plan::MemoryPlan& p, const plan::PlanOptions& po,
                        const PlanPrice& price, const PriceQuery& q);

}  // namespace k3::launch
