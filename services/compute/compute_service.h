// Pipeline mode of k3-compute (--pipeline), on the shared service shell (common/service):
// connects to the launcher (control + compute endpoints), the trunk reader and the expert
// fetcher, maps their arenas read-only, announces Ready, and answers every Generate with
// Tokens, control Stats and Done, using the same greedy loop as the standalone mode
// (generate.h). A Shutdown between requests ends it with exit 0; a stop signal, or a Shutdown
// during a request (seen within 50 ms at a safe point), ends the request with its Stats and
// Done, then exit 5 (docs/pipeline.md "k3-compute"). A Generate without keep_state starts from
// the longest cached prefix snapshot (prefix_cache.h; RunStats.cached_tokens says how many ids).
// What to run and what to answer is the Scheduler's (scheduler.h); this shell only feeds it.
#pragma once
#include <string>

namespace k3::compute {

struct PipelineOptions {
  std::string model_dir, control, endpoint, trunk, experts;
  std::string pinned_arena, ring_arena, experts_arena;
  std::string dump_logits;
  std::string embed_arena;      // set: embedding rows come through this window (not resident)
  bool stream_lm_head = false;  // lm_head comes through the ring in row chunks
  int threads = 0;
  std::string expert_inputs = "f32";  // as in StandaloneOptions
  bool probe_membw = false;           // as in StandaloneOptions
  bool prefetch_hints = false;        // as in StandaloneOptions; the guesses go to the fetcher
  int resend_ms = 1000;  // LayerWant / ExpertRequest repeated after this long without an answer
  double slot_wait_seconds = 10;  // PipelineExpertSource's slot_wait (--expert-slot-wait)
  int max_batch = 1;  // --max-batch: new sequences decoded together (docs/pipeline.md "Batched steps")
  int64_t prefix_cache_bytes = 0;  // bound of the prefix-snapshot cache (--prefix-cache; 0 = off)
  std::string prefix_store_dir;    // --prefix-store ("" = off; docs/pipeline.md "Prefix store")
  int64_t prefix_store_bytes = 0;  // --prefix-store-size
  int64_t prefix_store_interval = 4096;  // --prefix-store-interval (0: prompt ends only)
  int64_t prefill_chunk = 64;      // --prefill-chunk: default and most prompt tokens per pass (k3-launch: its plan's)
  std::string tokenizer_dir;       // --tokenizer: the vocabulary's bytes for Generate.constraint ("" = refused)
};

// The process: stop signals, control link, service lifecycle; returns the exit code.
int RunComputeService(const PipelineOptions& opt);

}  // namespace k3::compute
