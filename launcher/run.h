// One pipeline run: arenas, services, the Generate request, supervision, shutdown, report.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "common/plan/memory_plan.h"
#include "model_layout.h"
#include "options.h"

namespace k3::launch {

// Arena sizes: exactly the plan's shm regions (docs/pipeline.md "Arena formatting").
struct ArenaSizes {
  int64_t pinned = 0;
  int64_t embed_window = 0;  // 0: the embedding is resident in trunk-pinned
  uint32_t ring_slots = 0;
  int64_t ring_slot_bytes = 0;
  int64_t ring = 0;
  uint32_t expert_slots = 0;
  int64_t expert_slot_bytes = 0;
  int64_t experts = 0;
};
ArenaSizes SizeArenas(const ModelLayout& m, const plan::MemoryPlan& p);

// What to run. With a tokenizer directory the k3-tokenizer service runs with the others:
// a text prompt is encoded by it (and the generated text streams to stdout), and the
// report gets generated_text either way. Without one only ids work.
struct PromptInput {
  std::vector<int32_t> ids;   // --ids (used when !has_text)
  bool has_text = false;      // --prompt / --prompt-file
  std::string text;
  std::string tokenizer_dir;  // "" = no tokenizer service
};

// Every routed expert has a slot: the fetcher reads them all ahead (--warm).
bool AllExpertsResident(const ModelLayout& m, const plan::MemoryPlan& p);
// Why compute will not send next-layer expert hints (docs/pipeline.md "Next-layer expert
// hints") under this plan, or null when it will.
const char* HintsOffReason(const LaunchOptions& opt, const ModelLayout& m, const plan::MemoryPlan& p);

// Runs the prompt through the services; returns the exit code (throws k3::Error on failure).
int RunPipeline(const LaunchOptions& opt, const ModelLayout& m, const plan::MemoryPlan& p,
                const PromptInput& prompt);

}  // namespace k3::launch
