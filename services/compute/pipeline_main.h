// Pipeline mode of k3-compute: connects to the launcher (control + compute endpoints), the
// trunk reader and the expert fetcher, maps their arenas read-only, announces Ready, and
// answers every Generate with Tokens, a Stats message and Done, using the same greedy loop
// as the standalone mode (generate.h). Exits 0 on Shutdown.
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
};

int RunComputePipeline(const PipelineOptions& opt);

}  // namespace k3::compute
