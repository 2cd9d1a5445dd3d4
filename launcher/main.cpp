// k3-launch: reads the TOML + flags, plans the memory budget (printed before anything is
// loaded), then runs the pipeline of services (run.cpp) or, with --dry-run, stops there.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/end_ids.h"
#include "common/error.h"
#include "common/id_list.h"
#include "common/user_file.h"
#include "common/manifest.h"
#include "common/plan/memory_plan.h"
#include "common/run_main.h"
#include "common/state_file.h"
#include "common/stdout_writer.h"
#include "model_layout.h"
#include "disk_probe.h"
#include "plan_report.h"
#include "options.h"
#include "arena_sizes.h"
#include "command_lines.h"
#include "run.h"
#include "remote_run.h"
#include "common/process_init.h"

namespace {

int Main(int argc, char** argv) {
  using namespace k3;
  auto parsed = launch::ParseLaunchOptions(argc, argv);
  if (!parsed) return kExitOk;
  launch::LaunchOptions& opt = *parsed;
  // A running server does the model's work: nothing is planned or started here.
  if (!opt.connect.empty()) return launch::RunConnected(opt);
  const int64_t budget = plan::ParseBudget(opt.budget);

  launch::ModelLayout m = launch::LoadModelLayout(opt.model, opt.dry_run);
  if (!opt.coded_trunk.empty()) launch::UseCodedTrunk(m, opt.model, opt.coded_trunk);
  plan::PlanOptions po;
  po.context = opt.context;
  po.prefill_chunk = opt.prefill_chunk;  // a cap: the plan chooses the chunk
  po.prompt_logits = opt.perplexity;
  po.ring_slots = opt.ring_slots;
  if (!opt.trunk_piece.empty()) po.trunk_piece = plan::ParseTrunkPiece(opt.trunk_piece);
  if (!opt.read_ahead.empty()) {
    po.read_ahead = plan::ParseBudget(opt.read_ahead);
    if (opt.read_ahead == "auto") throw UsageError("--read-ahead: a size (128M), not auto");
  }
  po.max_pinned_trunk = opt.max_pinned_trunk;
  // The fetcher's bound: --inflight experts per server.
  po.remote_expert_frames = int64_t{opt.inflight} * static_cast<int64_t>(opt.expert_server.size());
  po.remote_servers = static_cast<int>(opt.expert_server.size());
  po.max_expert_slots = opt.expert_slots;
  po.spec_drafts = opt.spec;
  po.max_batch = opt.max_batch;
  // A single run feeds one prompt (or a chat on its kept sequence): auto leaves the cache off.
  // k3-server sends compute many requests, which share system prompts and chat turns.
  po.prefix_cache = launch::PrefixCacheFor(opt, !opt.serve.empty());
  // --serve: k3-server is a sixth process with its own threads, bodies and held requests.
  po.serve = {!opt.serve.empty(), opt.http_threads, opt.queue_size, opt.max_body_bytes};
  const plan::MemoryPlan p = plan::MakePlan(m.plan_model, budget, po);
  for (int32_t id : opt.stop_ids)
    if (id >= m.cfg.vocab_size)
      throw UsageError("--stop-ids/--stop-id: id " + std::to_string(id) + " outside [0," +
                       std::to_string(m.cfg.vocab_size) + ")");
  // A trunk-only copy without an expert server, or a server without a manifest: refused before
  // anything starts (the fetcher checks the same at its start). A dry run only plans.
  if (!opt.dry_run) CheckExpertSource(opt.model, opt.manifest, m.cfg, !opt.expert_server.empty(), opt.no_verify);
  // An output file that could not be written (a symlink, device or FIFO in its place, no
  // directory): refused now, not after the run (common/user_file.h).
  if (!opt.dry_run) launch::CheckOutputFiles(opt);
  std::FILE* plan_out = opt.dry_run ? stdout : stderr;  // stdout carries only ids in a run
  // --quiet: the plan goes nowhere in a run (a dry run prints it: that is what it is for).
  std::FILE* devnull = nullptr;
  // --json: stdout carries only the JSON object.
  if ((opt.quiet && !opt.dry_run) || opt.json) plan_out = devnull = std::fopen("/dev/null", "w");
  struct CloseAtExit {
    std::FILE* f;
    ~CloseAtExit() { if (f) std::fclose(f); }
  } close_devnull{devnull};
  std::fprintf(plan_out, "memory plan for %s (%lld layers, %s; %s)\n", opt.model.c_str(),
               static_cast<long long>(m.cfg.num_layers), m.from_headers ? "shard headers" : "config + index",
               opt.dry_run ? "dry run" : "run");
  std::fprintf(plan_out, "%s", p.Table().c_str());
  const launch::ArenaSizes a = launch::SizeArenas(m, p);
  std::fprintf(plan_out, "pinned layers: %zu of %lld; lm_head %s; expert slots %lld%s\n", p.pinned_layers.size(),
               static_cast<long long>(m.cfg.num_layers), p.lm_head_resident ? "resident" : "streamed",
               static_cast<long long>(p.expert_slots),
               p.expert_slots_capped ? (" (capped by --expert-slots " + std::to_string(opt.expert_slots) + ")").c_str() : "");
  std::fprintf(plan_out, "arenas: trunk-pinned %s, trunk-ring %u x %s, embed-window %s, experts %u x %s\n",
               k3::FormatBytes(a.pinned).c_str(), a.ring_slots, k3::FormatBytes(a.ring_slot_bytes).c_str(),
               k3::FormatBytes(a.embed_window).c_str(), a.expert_slots,
               k3::FormatBytes(a.expert_slot_bytes).c_str());
  if (!opt.expert_server.empty()) {
    std::string eps;
    for (const std::string& ep : opt.expert_server) eps += (eps.empty() ? "" : ", ") + ep;
    std::fprintf(plan_out, "routed experts read by the expert server%s at %s (k3-expert-server)\n",
                 opt.expert_server.size() > 1 ? "s" : "", eps.c_str());
  }
  if (p.prefix_cache > 0)
    std::fprintf(plan_out, "prefix cache: %s, %.1f snapshots of a full-context sequence (%s each)\n",
                 k3::FormatBytes(p.prefix_cache).c_str(),
                 static_cast<double>(p.prefix_cache) / static_cast<double>(std::max<int64_t>(p.prefix_snapshot_bytes, 1)),
                 k3::FormatBytes(p.prefix_snapshot_bytes).c_str());
  else
    std::fprintf(plan_out, "prefix cache: off%s\n",
                 opt.prefix_cache != "auto" ? ""
                 : opt.serve.empty()        ? " (auto: one request per run has no prefix to reuse)"
                                            : " (auto: no budget above the floor)");
  const char* hints_off = launch::HintsOffReason(opt, m, p);
  std::fprintf(plan_out, "next-layer expert hints: %s%s\n", hints_off ? "off, " : "on", hints_off ? hints_off : "");
  std::fprintf(plan_out, "streamed: embedding %s, lm_head %s\n",
               p.embed_resident ? "no (resident)" : ("rows via embed-window (" + std::to_string(p.embed_window_rows) + " rows)").c_str(),
               p.lm_head_resident ? "no (resident)"
                                  : ("via trunk-ring in " + std::to_string(p.lm_head_chunks) + " chunks of " +
                                     std::to_string(p.lm_head_chunk_rows) + " rows").c_str());
  // The chunk and the price of a token (docs/memory-plan.md "Prefill chunk", "Read price").
  launch::PriceQuery q;
  q.prompt_tokens = opt.prompt_tokens;
  if (q.prompt_tokens == 0 && !opt.ids.empty())
    q.prompt_tokens = static_cast<int64_t>(ParseIdList(opt.ids, "--ids", m.cfg.vocab_size).size());
  if (opt.disk_rate == "probe") {
    const launch::DiskProbe d = launch::ProbeDiskRate(opt.model);
    q.disk_rate = d.bytes_per_second;
    m.disk_raw_rate = d.bytes_per_second;  // the run's report sets the read rate beside it
    q.rate_source = "probed: " + k3::FormatBytes(d.bytes) + " O_DIRECT from " + std::to_string(d.files) + " shards";
  } else if (!opt.disk_rate.empty()) {
    q.disk_rate = plan::ParseDiskRate(opt.disk_rate);
    q.rate_source = "--disk-rate";
  }
  const launch::PlanPrice price = launch::PricePlan(m.plan_model, budget, po, p, q);
  std::fprintf(plan_out, "%s%s", launch::ChunkLine(po, p).c_str(), launch::PriceLines(p, price, q).c_str());
  if (opt.dry_run) std::fprintf(plan_out, "%s", launch::CodedLines(m.plan_model, budget, po, p).c_str());
  // Two computations must agree: the arenas sized from the layout (what the services fill)
  // and the plan's shm regions (what the budget charged), so the printed table is what gets
  // created.
  if (a.pinned != p.pinned_bytes || a.ring != p.ring_bytes || a.embed_window != p.embed_window_bytes ||
      a.experts != p.expert_arena_bytes)
    throw RuntimeFailure("internal: arenas sized from the layout (pinned " + std::to_string(a.pinned) + ", ring " +
                         std::to_string(a.ring) + ", embed-window " + std::to_string(a.embed_window) + ", experts " +
                         std::to_string(a.experts) + ") differ from the plan's (" + std::to_string(p.pinned_bytes) +
                         ", " + std::to_string(p.ring_bytes) + ", " + std::to_string(p.embed_window_bytes) + ", " +
                         std::to_string(p.expert_arena_bytes) + ")");
  if (opt.dry_run) {
    if (opt.json) WriteStdoutOrStop(launch::PlanJson(opt.model, p, po, price, q).dump(2) + "\n");
    WriteStdoutOrStop({});  // the plan: a closed pipe (| head -1) is exit 5, quietly
    return kExitOk;
  }
  std::fflush(plan_out);

  // Prompt: ids, or text the tokenizer service encodes (run.cpp). A tokenizer is the TOML's
  // `tokenizer` directory, else the model directory when it holds tiktoken.model.
  launch::PromptInput in;
  in.tokenizer_dir = opt.tokenizer;
  if (in.tokenizer_dir.empty() && std::filesystem::exists(std::filesystem::path(opt.model) / "tiktoken.model"))
    in.tokenizer_dir = opt.model;
  if (!opt.ids.empty()) {
    for (int64_t id : ParseIdList(opt.ids, "--ids", m.cfg.vocab_size)) in.ids.push_back(static_cast<int32_t>(id));
  } else if (!opt.prompt.empty() || !opt.prompt_file.empty()) {
    in.has_text = true;
    in.text = opt.prompt;
    if (!opt.prompt_file.empty()) {
      in.text = ReadUserFile(opt.prompt_file, kMaxPromptFileBytes, "--prompt-file", kExitBadInput,
                             FileKinds::kRegularOrPipe);
    }
    if (in.tokenizer_dir.empty())
      throw UsageError("--prompt needs a tokenizer: set 'tokenizer' in the TOML (a directory with "
                       "tiktoken.model) or pass --ids");
    if (in.text.empty()) throw BadInput("the prompt is empty");
  } else if (!opt.serve.empty()) {
    if (in.tokenizer_dir.empty())
      throw UsageError("--serve needs a tokenizer: set 'tokenizer' in the TOML (a directory with tiktoken.model)");
  } else if (opt.chat) {
    if (in.tokenizer_dir.empty())
      throw UsageError("--chat needs a tokenizer: set 'tokenizer' in the TOML (a directory with tiktoken.model)");
  } else {
    throw UsageError("no prompt: pass --ids, --prompt or --prompt-file (or --chat, --serve)");
  }
  if (!in.tokenizer_dir.empty() && !std::filesystem::exists(std::filesystem::path(in.tokenizer_dir) / "tiktoken.model"))
    throw UsageError("tokenizer: " + in.tokenizer_dir + " has no tiktoken.model");
  // State files: a bad --load-state is refused here, before any weight is read (exit 7); its
  // ids count against the context like the prompt's.
  if (!opt.save_state.empty()) {
    const std::filesystem::path sp(opt.save_state);
    std::error_code ec;
    const std::filesystem::path dir = sp.has_parent_path() ? sp.parent_path() : std::filesystem::path(".");
    if (std::filesystem::is_directory(sp, ec) || !std::filesystem::is_directory(dir, ec))
      throw Error(kExitOutput, "--save-state: cannot write " + opt.save_state);
  }
  if (!opt.load_state.empty()) {
    state::Expect want;
    want.cfg = &m.cfg;
    want.model = state::IdentifyModel(opt.model);
    want.expert_inputs_bf16 = opt.expert_inputs == "bf16";
    want.context = opt.context;
    in.state_tokens = static_cast<int64_t>(state::ReadStateFile(opt.load_state, want, nullptr).ids.size());
    const int64_t need = in.state_tokens + static_cast<int64_t>(in.ids.size());
    if (!in.has_text && need > opt.context)
      throw UsageError("the loaded state (" + std::to_string(in.state_tokens) + " tokens) plus the prompt (" +
                       std::to_string(in.ids.size()) + ") need " + std::to_string(need) +
                       " positions, more than the context of " + std::to_string(opt.context));
  }
  if (!opt.stop.empty() && in.tokenizer_dir.empty())
    throw UsageError("--stop needs a tokenizer (the text is matched after decoding): set 'tokenizer' in the TOML");
  // Prompt + generated ids never exceed the planned context; an id prompt is checked here, a
  // text prompt once the tokenizer service has encoded it (run.cpp), both before any weight
  // service starts.
  if (opt.load_state.empty() && static_cast<int64_t>(in.ids.size()) > opt.context)
    throw UsageError(launch::PromptTooLong(static_cast<int64_t>(in.ids.size()), opt.context));
  if (!opt.ignore_eos) in.end_ids = DefaultEndIds(m.cfg, in.tokenizer_dir);
  return launch::RunPipeline(opt, m, p, in);
}

}  // namespace

int main(int argc, char** argv) {
  k3::InitProcess();  // whole stderr lines, harmless signals (common/process_init.h)
  // Every stdout write treats a closed pipe as a requested stop (exit 5, quiet): the run's ids
  // (run.cpp), the dry run's plan, --help and --version (flushed here).
  k3::IgnoreSigpipe();
  return k3::RunMain("k3-launch", [&] {
    const int code = Main(argc, argv);
    k3::WriteStdoutOrStop({});
    return code;
  });
}
