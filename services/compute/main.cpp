// k3-compute: the forward-pass process. Standalone mode maps a checkpoint directory;
// pipeline mode (--pipeline) takes weights from the trunk reader and expert fetcher.
#include <CLI/CLI.hpp>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <string>

#include "common/cli_parse.h"
#include "common/error.h"
#include "common/id_list.h"
#include "common/option_limits.h"
#include "common/plan/memory_plan.h"
#include "common/process_init.h"
#include "common/run_main.h"
#include "common/sampling_flags.h"
#include "compute_service.h"
#include "omp_policy.h"
#include "standalone.h"

int main(int argc, char** argv) {
  k3::compute::EnsureOmpWaitPolicy();  // before the first parallel region (may re-execute)
  k3::InitProcess();  // whole stderr lines, harmless signals (after the re-exec, which resets handlers)
  using k3::compute::StandaloneOptions;
  StandaloneOptions opt;
  std::string ids_text;
  double mla_eps = 0;
  CLI::App app{"k3-compute: Kimi K3 forward pass"};
  app.add_option("--standalone", opt.model_dir, "checkpoint directory (standalone mode)");
  app.add_option("--ids", ids_text, "prompt token ids, comma separated");
  app.add_option("--gen", opt.gen, "tokens to generate (0 = prefill only)");
  app.add_flag("--full-recompute", opt.full_recompute, "re-run the whole prefix every step");
  app.add_option("--spec", opt.spec,
                 "speculative decoding: up to N n-gram drafts verified per forward pass, 0 to 16 "
                 "(same ids as 0; default 0)");
  app.add_option("--prefill-chunk", opt.prefill_chunk,
                 "prompt tokens per forward chunk (pipeline: the most a request may ask for; k3-launch passes its plan's)");
  app.add_option("--threads", opt.threads, "OpenMP threads (default: all cores)");
  app.add_option("--dump-logits", opt.dump_logits, "float32 logits choosing the first token");
  app.add_option("--dump-trace", opt.dump_trace, "per-layer activations of the prompt pass");
  app.add_flag("--tf-check", opt.tf_check, "teacher forcing: argmax at every prompt position");
  auto* eps_opt = app.add_option("--mla-norm-eps", mla_eps, "epsilon of the MLA latent norms");
  app.add_option("--out", opt.out, "JSON report");
  std::vector<std::string> stop_id_text;
  app.add_option("--stop-id", stop_id_text, "a token id that ends generation after being emitted (repeatable)")
      ->allow_extra_args(false);
  std::string stop_ids_text;
  app.add_option("--stop-ids", stop_ids_text, "token ids that end generation, comma separated");
  app.add_flag("--ignore-eos", opt.ignore_eos,
               "do not stop at the model's end ids (config.json eos_token_id; [EOS] and <|end_of_msg|> when the "
               "directory holds a tokenizer): run to --gen");
  app.add_option("--context", opt.context,
                 "prompt + generated tokens at most this many (default: the model's max_position_embeddings)");
  app.add_option("--expert-inputs", opt.expert_inputs,
                 "routed-expert inputs: f32 (exact, default) or bf16 (rounded, as the official reference)")
      ->check(CLI::IsMember({"f32", "bf16"}));
  app.add_flag("--probe-membw", opt.probe_membw,
               "benchmarks: after every decode step, time one all-threads read of the resident weights");
  app.add_flag("--prefetch-hints", opt.prefetch_hints,
               "guess each next layer's experts during decode and hint them to the expert source "
               "(standalone: only the guesses' recall is measured)");
  app.add_option("--save-state", opt.save_state, "write the sequence's state to this file after the run");
  app.add_option("--load-state", opt.load_state, "continue the state in this file; --ids are appended to it");
  k3::SamplingFlags sampling;
  k3::AddSamplingFlags(app, sampling);
  // Pipeline mode (spawned by k3-launch; docs/pipeline.md "Command lines").
  k3::compute::PipelineOptions pipe;
  bool pipeline = false;
  app.add_flag("--pipeline", pipeline, "pipeline mode: weights from the trunk reader / expert fetcher");
  app.add_option("--model", pipe.model_dir, "checkpoint directory (pipeline: tensor headers)");
  app.add_option("--control", pipe.control, "launcher control endpoint");
  app.add_option("--endpoint", pipe.endpoint, "launcher compute endpoint");
  app.add_option("--trunk", pipe.trunk, "trunk reader endpoint");
  app.add_option("--experts", pipe.experts, "expert fetcher endpoint");
  app.add_option("--pinned-arena", pipe.pinned_arena, "trunk-pinned shm name");
  app.add_option("--ring-arena", pipe.ring_arena, "trunk-ring shm name");
  app.add_option("--experts-arena", pipe.experts_arena, "experts shm name");
  app.add_option("--embed-arena", pipe.embed_arena, "embed-window shm name (embedding streamed)");
  app.add_flag("--stream-lm-head", pipe.stream_lm_head, "lm_head streamed through the ring");
  app.add_option("--max-batch", pipe.max_batch,
                 "pipeline: new sequences (Generates without keep_state) decoded together in one pass "
                 "over the weights, at most this many (docs/pipeline.md \"Batched steps\")")
      ->check(CLI::Range(1, static_cast<int>(k3::plan::kMaxBatch)));
  app.add_option("--expert-slot-wait", pipe.slot_wait_seconds,
                 "seconds to wait while every needed expert is refused for lack of a slot and compute "
                 "holds none (another client keeps them) before failing")
      ->check(CLI::Range(0.1, 3600.0));
  std::string prefix_cache = "0";
  app.add_option("--prefix-cache", prefix_cache,
                 "pipeline: bound of the prefix-snapshot cache, a size like 512M (a new sequence starts from the "
                 "longest cached prefix of its prompt; the same ids); 0 = off (default; k3-launch passes its plan's)");
  app.add_option("--prefix-store", pipe.prefix_store_dir,
                 "pipeline: directory of the persistent prefix store (docs/pipeline.md \"Prefix store\"): prompt "
                 "snapshots on disk, shared by every run of the model; a new sequence starts from the longest stored "
                 "prefix of its prompt (the same ids)");
  std::string prefix_store_size = "16G";
  app.add_option("--prefix-store-size", prefix_store_size,
                 "pipeline: the store's entries are kept under this many bytes, least recently used evicted first "
                 "(default 16G)");
  app.add_option("--tokenizer", pipe.tokenizer_dir,
                 "pipeline: tokenizer directory (tiktoken.model) whose token bytes constrained requests "
                 "(Generate.constraint, k3-server's response_format) are masked with; without it they are refused");
  app.add_option("--prefix-store-interval", pipe.prefix_store_interval,
                 "pipeline: a long prompt is also snapshotted every N ids, rounded up to whole prefill chunks "
                 "(0: only at its end; default 4096)")
      ->check(CLI::NonNegativeNumber);
  return k3::RunMain("k3-compute", [&]() -> int {
    if (!k3::ParseCommandLine(app, argc, argv, "k3-compute")) return k3::kExitOk;
    if (app.get_option("--threads")->count() > 0)  // the bound k3-launch applies (common/option_limits.h)
      if (const std::string bad = k3::limits::ThreadsProblem(opt.threads, false); !bad.empty()) throw k3::UsageError(bad);
    if (pipeline) {
      pipe.threads = opt.threads;
      pipe.dump_logits = opt.dump_logits;
      pipe.expert_inputs = opt.expert_inputs;
      pipe.probe_membw = opt.probe_membw;
      pipe.prefetch_hints = opt.prefetch_hints;
      if (opt.prefill_chunk < 1) throw k3::UsageError("--prefill-chunk must be >= 1");
      pipe.prefill_chunk = opt.prefill_chunk;
      pipe.prefix_cache_bytes = k3::plan::ParsePrefixCache(prefix_cache, "--prefix-cache", false);
      pipe.prefix_store_bytes = k3::plan::ParsePrefixCache(prefix_store_size, "--prefix-store-size", false);
      if (pipe.prefix_store_bytes <= 0) throw k3::UsageError("--prefix-store-size: a size above 0 (e.g. 16G)");
      return k3::compute::RunComputeService(pipe);
    }
    if (app.get_option("--prefix-cache")->count() > 0) throw k3::UsageError("--prefix-cache needs --pipeline");
    for (const char* f : {"--prefix-store", "--prefix-store-size", "--prefix-store-interval"})
      if (app.get_option(f)->count() > 0) throw k3::UsageError(std::string(f) + " needs --pipeline");
    if (opt.model_dir.empty())
      throw k3::UsageError("only --standalone MODEL_DIR is implemented so far");
    if (ids_text.empty()) throw k3::UsageError("--ids is required");
    for (int64_t id : k3::ParseIdList(ids_text, "--ids", int64_t{INT32_MAX} + 1)) opt.ids.push_back(static_cast<int32_t>(id));
    if (eps_opt->count() > 0) opt.mla_norm_eps = mla_eps;
    opt.stop_ids = k3::limits::ParseStopIds(stop_ids_text, stop_id_text);
    opt.sampling = sampling.sampling;
    if (!sampling.Given("--seed")) opt.sampling.seed = k3::RandomSeed();
    opt.logprobs = sampling.logprobs;
    opt.perplexity = sampling.perplexity;
    return k3::compute::RunStandalone(opt);
  });
}
