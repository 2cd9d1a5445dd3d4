// The run report: the JSON written to --out and the summary lines printed at the end of a
// run, both built from what the launcher recorded. Pure apart from WriteReportFile.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/ipc/messages.h"
#include "common/plan/memory_plan.h"
#include "arena_sizes.h"
#include "proc_stats.h"

namespace k3::launch {

// What one run recorded (run.cpp fills it).
struct RunRecord {
  std::vector<int32_t> prompt_ids;
  std::vector<int32_t> generated_ids;
  std::vector<double> token_seconds;                  // between consecutive token arrivals
  std::optional<ipc::compute::RunStats> done;         // compute's Done, when it came
  std::optional<ipc::compute::StopReason> finish_reason;  // Done.reason: why compute ended
  double run_seconds = 0;                             // Generate sent -> Done (or the stop)
  std::optional<double> first_token_seconds;          // Generate sent -> the first Token here
  std::map<std::string, std::map<std::string, double>> service_stats;  // latest Stats per service
  std::map<std::string, ProcMemory> peak;             // per process, incl. "launcher"
  std::map<std::string, int> restarts;
  uint64_t rejected_messages = 0;
  std::optional<std::string> generated_text;          // when the tokenizer finished decoding
  std::string stop_text;                              // the --stop string found ("" none): finish "stop"
  std::string tokenizer_error;
  std::string expert_inputs;
  std::vector<std::string> expert_servers;            // --expert-server, in order (the fetcher's server_<i>_*)
  bool prefetch_hints = false;
  std::string prefix_store;                           // --prefix-store DIR ("" = off)
  bool interrupted = false;                           // stopped by a signal or a closed stdout
  std::string stop_reason;
  int64_t state_loaded_tokens = -1;                   // --load-state: the ids it held (-1: none)
  std::string state_saved;                            // --save-state: the file written
  ipc::compute::Sampling sampling;                    // as sent (seed included)
  std::optional<std::vector<ipc::compute::Token>> logprobs;  // --logprobs: the Tokens received
  bool perplexity = false;                            // --perplexity: Done's nll_sum / scored_tokens
  double disk_raw_rate = 0;                           // --disk-rate probe before the run: bytes/s (0: none ran)
};

// The report's finish_reason for Done.reason: "length" (--gen or the context reached), "stop"
// (an end id or stop id), "interrupted", "cancelled" (a Cancel; BuildReport says "stop" when
// the launcher cancelled because a --stop text was found).
const char* FinishReasonName(ipc::compute::StopReason r);

nlohmann::json BuildReport(const RunRecord& r, const plan::MemoryPlan& plan, const ArenaSizes& arenas);
// The "[launch] ..." lines (without newlines) that summarize a report from BuildReport.
std::vector<std::string> SummaryLines(const nlohmann::json& report, int64_t budget);
// Writes the report; k3::Error(kExitOutput) naming `path` when it cannot be written.
void WriteReportFile(const std::string& path, const nlohmann::json& report);

}  // namespace k3::launch
