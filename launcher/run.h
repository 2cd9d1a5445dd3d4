// One pipeline run: arenas, services, the Generate request, supervision, shutdown. The
// service command lines are command_lines.h, the arena sizes arena_sizes.h, the report
// report.h.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "arena_sizes.h"
#include "command_lines.h"
#include "common/plan/memory_plan.h"
#include "model_layout.h"
#include "options.h"
#include "supervisor.h"

namespace k3::launch {

// What to run. With a tokenizer directory the k3-tokenizer service runs with the others:
// a text prompt is encoded by it (and the generated text streams to stdout), and the
// report gets generated_text either way. Without one only ids work.
struct PromptInput {
  std::vector<int32_t> ids;   // --ids (used when !has_text)
  bool has_text = false;      // --prompt / --prompt-file
  std::string text;
  std::string tokenizer_dir;  // "" = no tokenizer service
  int64_t state_tokens = -1;  // --load-state: the ids of the checked state file (-1: none)
  std::vector<int32_t> end_ids;  // the model's end ids (common/end_ids.h); empty with --ignore-eos
};

// Why a Hello is rejected ("" when it is accepted): it must name a service we started, come
// from the DEALER of that name, and carry the pid of the child running under that name now.
std::string HelloMismatch(const std::vector<Service>& services, const std::string& identity,
                          const std::string& service, int64_t pid);

// "the prompt has N tokens but the context is C (--context)": the one line of exit 2.
std::string PromptTooLong(int64_t prompt_tokens, int64_t context);

// Runs the prompt through the services; returns the exit code (throws k3::Error on failure:
// the first failing service's exit code and reason, docs/exit-codes.md).
int RunPipeline(const LaunchOptions& opt, const ModelLayout& m, const plan::MemoryPlan& p,
                const PromptInput& prompt);

}  // namespace k3::launch
