// One pipeline run: arenas, services, the Generate request, supervision, shutdown, report.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/plan/memory_plan.h"
#include "model_layout.h"
#include "options.h"

namespace k3::launch {

// Arena sizes derived from the plan and the layout (docs/pipeline.md "Arena formatting").
struct ArenaSizes {
  int64_t pinned = 0;
  uint32_t ring_slots = 0;
  int64_t ring_slot_bytes = 0;
  int64_t ring = 0;
  uint32_t expert_slots = 0;
  int64_t expert_slot_bytes = 0;
  int64_t experts = 0;
};
ArenaSizes SizeArenas(const ModelLayout& m, const plan::MemoryPlan& p);

// Runs the prompt through the services; returns the exit code (throws k3::Error on failure).
int RunPipeline(const LaunchOptions& opt, const ModelLayout& m, const plan::MemoryPlan& p,
                const std::vector<int32_t>& prompt_ids,
                const std::function<std::string(const std::vector<int32_t>&)>& decode = {});

}  // namespace k3::launch
