#include "standalone.h"

#include <omp.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <csignal>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>

#include "common/error.h"
#include "common/user_file.h"
#include "common/median.h"
#include "common/end_ids.h"
#include "common/sampling_check.h"
#include "common/plan/memory_plan.h"
#include "common/manifest.h"
#include "common/service/service_shell.h"
#include "common/stdout_writer.h"
#include "forward.h"
#include "generate.h"
#include "mixers.h"
#include "mmap_source.h"
#include "saved_state.h"

namespace k3::compute {

namespace {

// Fails early (exit 4) when an output could not be written (common/user_file.h).
void CheckWritable(const std::string& path, const char* flag) {
  if (!path.empty()) CheckOutputPath(path, flag);
}

void WriteFile(const std::string& path, const void* data, size_t bytes) {
  WriteFileAtomically(path, {static_cast<const char*>(data), bytes}, "", kExitOutput);
}

}  // namespace

int RunStandalone(const StandaloneOptions& opt) {
  if (opt.ids.empty()) throw UsageError("--ids: at least one id is required");
  if (opt.gen < 0) throw UsageError("--gen must be >= 0");
  if (opt.prefill_chunk < 1) throw UsageError("--prefill-chunk must be >= 1");
  if (opt.threads < 0) throw UsageError("--threads must be >= 1");
  if (opt.spec < 0 || opt.spec > plan::kMaxSpecDrafts)
    throw UsageError("--spec must be 0 to " + std::to_string(plan::kMaxSpecDrafts));
  if (opt.spec > 0 && opt.full_recompute) throw UsageError("--spec needs incremental decoding, not --full-recompute");
  if (opt.mla_norm_eps && !(*opt.mla_norm_eps > 0)) throw UsageError("--mla-norm-eps must be > 0");
  if (const std::string bad = SamplingProblem(opt.sampling, opt.logprobs); !bad.empty()) throw UsageError(bad);
  CheckWritable(opt.out, "--out");
  CheckWritable(opt.dump_logits, "--dump-logits");
  CheckWritable(opt.save_state, "--save-state");
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
  for (int32_t id : opt.stop_ids)
    if (id >= cfg.vocab_size)
      throw UsageError("--stop-id: id " + std::to_string(id) + " outside [0," + std::to_string(cfg.vocab_size) + ")");
  if (opt.context < 0) throw UsageError("--context must be >= 1");
  // Prompt + generated ids never exceed the context: a prompt that does not fit is refused
  // before any weight is mapped.
  const int64_t context = opt.context > 0 ? opt.context : cfg.max_position_embeddings;
  // End ids: config.json's, plus the tokenizer's [EOS] / <|end_of_msg|> when the checkpoint
  // directory holds a tokenizer (tiktoken.model), as k3-launch does.
  std::vector<int32_t> stop_ids = opt.stop_ids;
  if (!opt.ignore_eos) {
    const bool has_tok = std::filesystem::exists(std::filesystem::path(opt.model_dir) / "tiktoken.model");
    stop_ids = MergeIds(DefaultEndIds(cfg, has_tok ? opt.model_dir : ""), stop_ids);
  }
  // A state file is checked completely (model, checksum, ...) before any weight is mapped.
  std::optional<state::ModelIdentity> identity;
  std::optional<SavedSequence> loaded;
  if (!opt.load_state.empty() || !opt.save_state.empty()) identity = state::IdentifyModel(opt.model_dir);
  if (!opt.load_state.empty()) loaded = LoadSequence(opt.load_state, cfg, *identity, 0);
  const int64_t held = static_cast<int64_t>(opt.ids.size() + (loaded ? loaded->ids.size() : 0));
  if (context > 0 && held > context)
    throw UsageError("the prompt has " + std::to_string(held) + " tokens" + (loaded ? " with the loaded state" : "") +
                     " but the context is " + std::to_string(context) + " (--context): it does not fit");
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
  // A loaded state: its ids not consumed yet go first, then the new prompt.
  std::vector<int32_t> consumed;
  std::vector<int32_t> feed = opt.ids;
  if (loaded) {
    // --full-recompute recomputes every step from nothing: it feeds the whole sequence.
    const auto pos = opt.full_recompute ? 0 : static_cast<std::ptrdiff_t>(loaded->state.position);
    if (opt.full_recompute) loaded->state.Reset(cfg);
    consumed.assign(loaded->ids.begin(), loaded->ids.begin() + pos);
    feed.insert(feed.begin(), loaded->ids.begin() + pos, loaded->ids.end());
    fwd.LoadState(std::move(loaded->state));
    std::fprintf(stderr, "[compute] state loaded from %s: %zu tokens\n", opt.load_state.c_str(), loaded->ids.size());
  }
  GreedyParams gp;
  gp.ids = feed;
  gp.gen = opt.gen;
  gp.full_recompute = opt.full_recompute;
  gp.prefill_chunk = opt.prefill_chunk;
  gp.stop_ids = stop_ids;
  gp.max_positions = context;
  gp.prior = consumed;
  gp.all_positions = opt.tf_check || tracer || opt.perplexity;
  gp.spec = opt.spec;
  gp.tracer = tracer.get();
  gp.sampling = opt.sampling;
  std::vector<int32_t> tf_pred;
  PromptScorer scorer{feed};
  GreedyHooks hooks;
  hooks.on_prompt_chunk = [&](const float* chunk_logits, int64_t T) {
    for (int64_t t = 0; t < T; ++t) tf_pred.push_back(Argmax(chunk_logits + t * V, V));
    if (opt.perplexity) scorer.Chunk(chunk_logits, T, V);
  };
  nlohmann::json logprobs = nlohmann::json::array();
  if (opt.logprobs >= 0)
    hooks.on_chosen = [&](const float* logits, int32_t id, int64_t) {
      const Logprobs lp = TokenLogprobs(logits, V, id, opt.logprobs);
      nlohmann::json top = nlohmann::json::array();
      for (const auto& [alt, l] : lp.top) top.push_back({{"id", alt}, {"logprob", l}});
      logprobs.push_back({{"id", id}, {"logprob", lp.logprob}, {"top", top}});
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
  std::vector<int32_t> full = consumed;  // the whole sequence
  full.insert(full.end(), res.full.begin(), res.full.end());
  if (!opt.save_state.empty()) {
    if (fwd.torn())
      std::fprintf(stderr, "[compute] state not saved: the run stopped in the middle of a pass\n");
    else
      SaveSequence(opt.save_state, cfg, *identity, fwd.state(), full, "");
  }
  const double prefill_s = res.prefill_seconds, decode_s = res.decode_seconds;
  const double spt = res.seconds_per_token;
  if (interrupted)
    std::fprintf(stderr, "\n[compute] interrupted %s after %zu tokens\n",
                 res.prefill_done ? "during decoding" : "during the prompt pass", generated.size());
  std::fprintf(stderr, "[compute] %zu tokens generated, %.4f s/token, prefill %.2f tok/s\n",
               generated.size(), spt,
               static_cast<double>(opt.ids.size()) / (prefill_s > 0 ? prefill_s : 1e-9));
  if (opt.spec > 0)
    std::fprintf(stderr, "[compute] speculation: %lld drafts verified, %lld accepted\n",
                 static_cast<long long>(res.spec_drafted), static_cast<long long>(res.spec_accepted));

  if (opt.perplexity && scorer.scored > 0)
    std::fprintf(stderr, "[compute] prompt perplexity %.4f (%.4f nats/token over %lld tokens)\n",
                 std::exp(scorer.nll_sum / static_cast<double>(scorer.scored)),
                 scorer.nll_sum / static_cast<double>(scorer.scored), static_cast<long long>(scorer.scored));
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
                        {"layers", cfg.num_layers},
                        {"spec", opt.spec},
                        {"spec_drafted", res.spec_drafted},
                        {"spec_accepted", res.spec_accepted}};
    if (interrupted) r["interrupted"] = true;
    if (loaded) r["state_loaded_tokens"] = loaded->ids.size();
    r["finish_reason"] = interrupted ? "interrupted" : res.ending == Ending::kStopId ? "stop" : "length";
    if (opt.tf_check) r["tf_pred"] = tf_pred;
    if (!IsGreedy(opt.sampling)) r["sampling"] = SamplingJson(opt.sampling);
    if (opt.logprobs >= 0) r["logprobs"] = logprobs;
    if (opt.perplexity) {
      r["scored_tokens"] = scorer.scored;
      r["nll_sum"] = scorer.nll_sum;
      const double nll = scorer.scored > 0 ? scorer.nll_sum / static_cast<double>(scorer.scored) : 0.0;
      r["nll_per_token"] = scorer.scored > 0 ? nlohmann::json(nll) : nlohmann::json();  // null: nothing scored
      r["perplexity"] = scorer.scored > 0 ? nlohmann::json(std::exp(nll)) : nlohmann::json();
    }
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
