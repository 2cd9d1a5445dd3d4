#include "standalone.h"

#include <omp.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "../../common/error.h"
#include "../../common/median.h"
#include "common/manifest.h"
#include "common/service/service_shell.h"
#include "common/stdout_writer.h"
#include "forward.h"
#include "generate.h"
#include "mixers.h"
#include "mmap_source.h"

namespace k3::compute {

namespace {

// Fails early (exit 4) when an output path's directory cannot take a file.
void CheckWritable(const std::string& path, const char* flag) {
  if (path.empty()) return;
  std::filesystem::path p(path);
  std::filesystem::path dir = p.has_parent_path() ? p.parent_path() : std::filesystem::path(".");
  std::error_code ec;
  if (std::filesystem::is_directory(p, ec) || !std::filesystem::is_directory(dir, ec) ||
      ::access(dir.c_str(), W_OK) != 0)
    throw Error(kExitOutput, std::string(flag) + ": cannot write " + path);
}

void WriteFile(const std::string& path, const void* data, size_t bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(static_cast<const char*>(data), static_cast<std::streamsize>(bytes));
  f.close();
  if (!f) throw Error(kExitOutput, "cannot write " + path);
}

}  // namespace

int RunStandalone(const StandaloneOptions& opt) {
  if (opt.ids.empty()) throw UsageError("--ids: at least one id is required");
  if (opt.gen < 0) throw UsageError("--gen must be >= 0");
  if (opt.prefill_chunk < 1) throw UsageError("--prefill-chunk must be >= 1");
  if (opt.threads < 0) throw UsageError("--threads must be >= 1");
  if (opt.mla_norm_eps && !(*opt.mla_norm_eps > 0)) throw UsageError("--mla-norm-eps must be > 0");
  CheckWritable(opt.out, "--out");
  CheckWritable(opt.dump_logits, "--dump-logits");
  // SIGINT / SIGTERM / SIGHUP (also while loading) stop the run at the next safe point, between
  // layers or tokens, through the service shell's stop flag; so does a closed stdout (| head:
  // SIGPIPE is ignored and the failed write is the request), which ends with exit 5 too.
  svc::InstallStopSignals();

  ModelConfig cfg = LoadModelConfig(opt.model_dir + "/config.json");
  // Standalone reads every expert from the shards: a trunk-only copy has holes there.
  CheckExpertSource(opt.model_dir, "", cfg, false, false);
  if (opt.mla_norm_eps) cfg.mla_norm_eps = *opt.mla_norm_eps;
  cfg.expert_inputs_bf16 = ExpertInputsBf16(opt.expert_inputs);
  for (int32_t id : opt.ids)
    if (id < 0 || id >= cfg.vocab_size)
      throw UsageError("--ids: id " + std::to_string(id) + " outside [0," +
                       std::to_string(cfg.vocab_size) + ")");
  const int threads = opt.threads > 0 ? opt.threads : omp_get_num_procs();
  omp_set_num_threads(threads);

  std::fprintf(stderr, "[compute] %d threads, kernels %s, routed-expert inputs %s (%s)\n", threads,
               kern::ActiveIsa(), opt.expert_inputs.c_str(), ExpertIsa(cfg));
  std::fprintf(stderr, "[compute] loading %lld layers…", static_cast<long long>(cfg.num_layers));
  std::fflush(stderr);
  MappedCheckpoint ck(opt.model_dir);
  const GlobalWeights globals = BindGlobals(cfg, ck.Resolver());
  MmapLayerSource layers(cfg, ck, [](int64_t) {
    std::fputc('.', stderr);
    std::fflush(stderr);
  });
  MmapExpertSource experts(cfg, ck);
  std::fprintf(stderr, " done\n");
  std::unique_ptr<Tracer> tracer;
  if (!opt.dump_trace.empty()) tracer = std::make_unique<Tracer>(opt.dump_trace);

  const int64_t V = cfg.vocab_size;
  Forward fwd(cfg, globals, layers, experts);
  fwd.EnableHints(opt.prefetch_hints);
  fwd.SetStopCheck(svc::StopRequested);
  GreedyParams gp;
  gp.ids = opt.ids;
  gp.gen = opt.gen;
  gp.full_recompute = opt.full_recompute;
  gp.prefill_chunk = opt.prefill_chunk;
  gp.all_positions = opt.tf_check || tracer;
  gp.tracer = tracer.get();
  std::vector<int32_t> tf_pred;
  GreedyHooks hooks;
  hooks.on_prompt_chunk = [&](const float* chunk_logits, int64_t T) {
    for (int64_t t = 0; t < T; ++t) tf_pred.push_back(Argmax(chunk_logits + t * V, V));
  };
  hooks.on_prefill_progress = [](int64_t done, int64_t n) {
    std::fprintf(stderr, "\r[compute] prefill %lld/%lld tokens", static_cast<long long>(done),
                 static_cast<long long>(n));
    if (done == n) std::fputc('\n', stderr);
    std::fflush(stderr);
  };
  hooks.after_prefill = [&](const float* logits) {
    if (!opt.dump_logits.empty())
      WriteFile(opt.dump_logits, logits, static_cast<size_t>(V) * sizeof(float));
    if (tracer) {
      nlohmann::json meta = {{"T", opt.ids.size()}, {"hidden", cfg.hidden_size},
                             {"layers", cfg.num_layers}, {"vocab", V}, {"top_k", cfg.top_k}};
      tracer->WriteText("meta.json", meta.dump() + "\n");
    }
  };
  std::vector<double> probe_gbs;
  bool stdout_closed = false;
  hooks.on_token = [&](int32_t id, int64_t index) {
    if (!stdout_closed) {
      const std::string line = std::to_string(id) + "\n";
      const StdoutWrite w = WriteStdout(line);
      if (w == StdoutWrite::kFailed) throw Error(kExitOutput, std::string("stdout: ") + std::strerror(errno));
      stdout_closed = w == StdoutWrite::kClosed;
    }
    if (opt.probe_membw && index > 0) probe_gbs.push_back(ProbeReadGBs(ck.Regions()));  // between steps
  };
  hooks.should_stop = [&] { return stdout_closed || svc::StopRequested(); };
  const GreedyResult res = RunGreedy(fwd, V, gp, hooks);
  const bool interrupted = res.ending == Ending::kInterrupted;
  const std::vector<int32_t>& generated = res.generated;
  const std::vector<int32_t>& full = res.full;
  const double prefill_s = res.prefill_seconds, decode_s = res.decode_seconds;
  const double spt = res.seconds_per_token;
  if (interrupted)
    std::fprintf(stderr, "\n[compute] interrupted %s after %zu tokens\n",
                 res.prefill_done ? "during decoding" : "during the prompt pass", generated.size());
  std::fprintf(stderr, "[compute] %zu tokens generated, %.4f s/token, prefill %.2f tok/s\n",
               generated.size(), spt,
               static_cast<double>(opt.ids.size()) / (prefill_s > 0 ? prefill_s : 1e-9));

  const HintStats& hs = fwd.hint_stats();
  if (opt.prefetch_hints)
    std::fprintf(stderr, "[compute] next-layer expert guesses: %llu layers, recall %.3f (%llu of %llu routed experts)\n",
                 static_cast<unsigned long long>(hs.hints), hs.recall(), static_cast<unsigned long long>(hs.matched),
                 static_cast<unsigned long long>(hs.guessed));
  if (opt.probe_membw)
    std::fprintf(stderr, "[compute] read-bandwidth probe over the mapped shards: median %.1f GB/s (%zu passes)\n",
                 k3::Median(probe_gbs), probe_gbs.size());
  if (!opt.out.empty()) {
    nlohmann::json r = {{"prompt_ids", opt.ids},
                        {"generated_ids", generated},
                        {"full_ids", full},
                        {"seconds_per_token", spt},
                        {"prefill_seconds", prefill_s},
                        {"decode_seconds", decode_s},
                        {"token_seconds", res.token_seconds},
                        {"median_token_seconds", k3::Median(res.token_seconds)},
                        {"threads", threads},
                        {"isa", kern::ActiveIsa()},
                        {"expert_inputs", opt.expert_inputs},
                        {"expert_isa", ExpertIsa(cfg)},
                        {"layers", cfg.num_layers}};
    if (interrupted) r["interrupted"] = true;
    if (opt.tf_check) r["tf_pred"] = tf_pred;
    if (opt.prefetch_hints) {
      r["hint_layers"] = hs.hints;
      r["hint_recall"] = hs.recall();
    }
    if (opt.probe_membw) {
      r["membw_probe_gbs"] = probe_gbs;
      r["membw_probe_median_gbs"] = k3::Median(probe_gbs);
    }
    const std::string text = r.dump(1) + "\n";
    WriteFile(opt.out, text.data(), text.size());
  }
  return interrupted ? kExitInterrupted : kExitOk;
}

}  // namespace k3::compute
