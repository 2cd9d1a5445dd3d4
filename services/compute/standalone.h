// Standalone mode of k3-compute: loads a checkpoint directory by mmap, runs the prompt in
// chunks and decoding (greedy by default; sampler.h), and writes the report / logits / trace files of
// docs/test-contracts.md. Errors are k3::Error with the contract's exit codes.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "sampler.h"

namespace k3::compute {

struct StandaloneOptions {
  std::string model_dir;
  std::vector<int32_t> ids;
  int64_t gen = 8;
  bool full_recompute = false;
  int64_t spec = 0;  // n-gram drafts per verify pass (speculate.h)
  int64_t prefill_chunk = 64;
  int threads = 0;  // 0 = all cores
  std::string dump_logits, dump_trace, out;
  bool tf_check = false;
  std::optional<double> mla_norm_eps;
  std::string expert_inputs = "f32";  // "f32" (exact) or "bf16" (ModelConfig::expert_inputs_bf16)
  bool probe_membw = false;           // read-bandwidth probe after every decode step (membw_probe.h)
  bool prefetch_hints = false;        // next-layer expert guesses (expert_hints.h); here: recall only
  std::string save_state;             // state file written after the run (docs/formats.md "State file")
  std::string load_state;             // state file continued: `ids` are appended to its sequence
  std::vector<int32_t> stop_ids;      // --stop-id / --stop-ids: end generation after emitting one
  bool ignore_eos = false;            // do not add the model's end ids (common/end_ids.h)
  int64_t context = 0;                // prompt + generated at most this; 0: max_position_embeddings
  SamplingParams sampling;            // default greedy (docs/sampling.md)
  int32_t logprobs = -1;              // -1 off; N: each token's logprob and the N most likely ids
  bool perplexity = false;            // score the prompt teacher-forced
};

// Runs and returns the process exit code (0); throws k3::Error on failure.
int RunStandalone(const StandaloneOptions& opt);

}  // namespace k3::compute
