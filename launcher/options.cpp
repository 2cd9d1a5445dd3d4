#include "options.h"

#include <CLI/CLI.hpp>
#include <toml++/toml.h>

#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/error.h"
#include "common/id_list.h"
#include "common/version.h"

namespace k3::launch {
namespace {

std::string ResolvePath(const std::string& base_dir, const std::string& p) {
  if (p.empty() || std::filesystem::path(p).is_absolute() || base_dir.empty()) return p;
  return (std::filesystem::path(base_dir) / p).lexically_normal().string();
}

}  // namespace

int MaxThreads() {
  const long n = ::sysconf(_SC_NPROCESSORS_ONLN);
  return 4 * static_cast<int>(std::clamp<long>(n, 1, 1 << 20));
}

void ApplyToml(const std::string& toml_text, const std::string& source_name,
               const std::string& base_dir, LaunchOptions& opt) {
  toml::table tbl;
  try {
    tbl = toml::parse(toml_text, source_name);
  } catch (const toml::parse_error& e) {
    std::ostringstream msg;
    msg << source_name << ":" << e.source().begin.line << ": " << e.description();
    throw UsageError(msg.str());
  }
  for (auto&& [key, node] : tbl) {
    const std::string k(key.str());
    auto bad = [&](const char* want) {
      return UsageError(source_name + ": key '" + k + "' must be " + want);
    };
    auto str = [&]() {
      if (!node.is_string()) throw bad("a string");
      return std::string(*node.value<std::string>());
    };
    auto integer = [&]() {
      if (!node.is_integer()) throw bad("an integer");
      return *node.value<int64_t>();
    };
    auto small_int = [&]() {  // fields held in an int: no silent wrap-around
      const int64_t v = integer();
      if (v < INT_MIN || v > INT_MAX) throw bad("an integer in int range");
      return static_cast<int>(v);
    };
    if (k == "model") opt.model = ResolvePath(base_dir, str());
    else if (k == "tokenizer") opt.tokenizer = ResolvePath(base_dir, str());
    else if (k == "budget") opt.budget = node.is_integer() ? std::to_string(integer()) : str();
    else if (k == "io") opt.io = str();
    else if (k == "prompt") opt.prompt = str();
    else if (k == "prompt_file") opt.prompt_file = ResolvePath(base_dir, str());
    else if (k == "ids") opt.ids = str();
    else if (k == "gen") opt.gen = integer();
    else if (k == "context") opt.context = integer();
    else if (k == "prefill_chunk") opt.prefill_chunk = integer();
    else if (k == "ring_slots") opt.ring_slots = small_int();
    else if (k == "threads") opt.threads = small_int();
    else if (k == "expert_inputs") opt.expert_inputs = str();
    else if (k == "expert_server") opt.expert_server = str();
    else if (k == "manifest") opt.manifest = ResolvePath(base_dir, str());
    else if (k == "no_verify") {
      if (!node.is_boolean()) throw bad("true or false");
      opt.no_verify = *node.value<bool>();
    }
    else if (k == "inflight") opt.inflight = small_int();
    else if (k == "max_pinned_trunk") opt.max_pinned_trunk = integer();
    else if (k == "full_recompute") {
      if (!node.is_boolean()) throw bad("true or false");
      opt.full_recompute = *node.value<bool>();
    } else if (k == "expert_server_timeout") {
      if (!node.is_number()) throw bad("a number of seconds");
      opt.expert_server_timeout = *node.value<double>();
    } else if (k == "prefetch_hints") {
      if (!node.is_boolean()) throw bad("true or false");
      opt.prefetch_hints = *node.value<bool>();
    } else if (k == "quiet") {
      if (!node.is_boolean()) throw bad("true or false");
      opt.quiet = *node.value<bool>();
    } else if (k == "stop_ids") {
      const toml::array* arr = node.as_array();
      if (!arr) throw bad("a list of token ids");
      opt.stop_ids.clear();
      for (const toml::node& e : *arr) {
        if (!e.is_integer() || *e.value<int64_t>() < 0 || *e.value<int64_t>() > INT32_MAX)
          throw bad("a list of non-negative token ids");
        opt.stop_ids.push_back(static_cast<int32_t>(*e.value<int64_t>()));
      }
    } else if (k == "out") opt.out = str();
    else throw UsageError(source_name + ": unknown key '" + k + "'");
  }
}

std::optional<LaunchOptions> ParseLaunchOptions(int argc, char** argv) {
  LaunchOptions cli;
  CLI::App app{"k3-launch: run Kimi K3 as a pipeline of services within a memory budget"};
  app.set_version_flag("--version", VersionLine("k3-launch"));
  app.add_option("config", cli.config_path, "TOML configuration (configs/*.toml)")->required();
  app.add_option("--budget", cli.budget, "memory budget for everything: 8G, 32G, 128G, auto");
  app.add_option("--model", cli.model, "checkpoint directory (overrides the TOML)");
  auto* prompt = app.add_option("--prompt", cli.prompt, "prompt text (needs a tokenizer)");
  auto* prompt_file = app.add_option("--prompt-file", cli.prompt_file, "prompt text file");
  auto* ids = app.add_option("--ids", cli.ids, "prompt token ids, comma separated");
  prompt->excludes(prompt_file)->excludes(ids);
  prompt_file->excludes(ids);
  app.add_option("--gen", cli.gen, "tokens to generate greedily");
  app.add_option("--io", cli.io, "read backend: direct, pread, uring, mmap");
  app.add_option("--out", cli.out, "JSON report");
  app.add_option("--dump-logits", cli.dump_logits, "float32 logits choosing the first token");
  app.add_option("--threads", cli.threads,
                 "compute threads, 1 to 4 x online CPUs (" + std::to_string(MaxThreads()) + " here); 0 or absent: all cores");
  app.add_option("--expert-inputs", cli.expert_inputs, "routed-expert inputs: f32 (exact) or bf16 (rounded, faster)");
  app.add_option("--context", cli.context,
                 "context length the plan reserves (at most the model's max_position_embeddings)");
  std::string stop_ids;
  app.add_option("--stop-ids", stop_ids,
                 "token ids that end generation after being emitted, comma separated (TOML: stop_ids = [..])");
  app.add_flag("--quiet", cli.quiet, "stderr: only errors and the final summary (no progress or service lines)");
  app.add_option("--inflight", cli.inflight, "reads in flight per reader service (default 4)");
  app.add_option("--dump-cache-trace", cli.dump_cache_trace, "directory for the expert fetcher's cache trace");
  app.add_flag("--dry-run", cli.dry_run, "print the memory plan and exit");
  app.add_option("--expert-server", cli.expert_server,
                 "read routed experts from the k3-expert-server at this endpoint (tcp://HOST:PORT)");
  app.add_option("--manifest", cli.manifest,
                 "expert manifest the experts from --expert-server are checked against (default: "
                 "k3-manifest.json in the model directory; k3-model digest writes it)");
  app.add_flag("--no-verify", cli.no_verify, "do not check experts from --expert-server against a manifest");
  bool no_hints = false;
  app.add_flag("--no-prefetch-hints", no_hints, "do not send next-layer expert guesses to the fetcher");
  app.add_flag("--probe-membw", cli.probe_membw,
               "benchmarks: compute times one read of the resident weights after every decode step");
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {  // --help, --version
    app.exit(e);
    return std::nullopt;
  } catch (const CLI::ParseError& e) {
    throw UsageError(e.what());
  }

  LaunchOptions opt;
  std::ifstream in(cli.config_path);
  if (!in) throw UsageError("cannot read config " + cli.config_path);
  std::stringstream text;
  text << in.rdbuf();
  const std::string base = std::filesystem::path(cli.config_path).parent_path().string();
  ApplyToml(text.str(), cli.config_path, base, opt);
  opt.config_path = cli.config_path;
  // Flags given on the command line win over the TOML.
  auto given = [&](const char* name) { return app.get_option(name)->count() > 0; };
  if (given("--budget")) opt.budget = cli.budget;
  if (given("--model")) opt.model = cli.model;
  if (given("--prompt") || given("--prompt-file") || given("--ids")) {
    opt.prompt = cli.prompt;
    opt.prompt_file = cli.prompt_file;
    opt.ids = cli.ids;
  }
  if (given("--gen")) opt.gen = cli.gen;
  if (given("--io")) opt.io = cli.io;
  if (given("--out")) opt.out = cli.out;
  if (given("--dump-logits")) opt.dump_logits = cli.dump_logits;
  if (given("--threads")) opt.threads = cli.threads;
  if (given("--context")) opt.context = cli.context;
  if (given("--expert-inputs")) opt.expert_inputs = cli.expert_inputs;
  if (given("--inflight")) opt.inflight = cli.inflight;
  if (given("--dump-cache-trace")) opt.dump_cache_trace = cli.dump_cache_trace;
  if (given("--expert-server")) opt.expert_server = cli.expert_server;
  if (given("--manifest")) opt.manifest = cli.manifest;
  if (cli.no_verify) opt.no_verify = true;
  if (given("--stop-ids")) {
    opt.stop_ids.clear();
    for (int64_t id : k3::ParseIdList(stop_ids, "--stop-ids", int64_t{INT32_MAX} + 1))
      opt.stop_ids.push_back(static_cast<int32_t>(id));
  }
  if (cli.quiet) opt.quiet = true;
  opt.dry_run = cli.dry_run;
  if (no_hints) opt.prefetch_hints = false;
  opt.probe_membw = cli.probe_membw;

  CheckOptions(opt);
  return opt;
}

void CheckOptions(const LaunchOptions& opt) {
  if (opt.budget.empty()) throw UsageError("--budget is required (in the TOML or on the command line)");
  if (opt.model.empty()) throw UsageError("no model: set 'model' in the TOML or pass --model");
  if (opt.gen < 0) throw UsageError("--gen must be >= 0");
  // 0 = all cores. More threads than 4 per core only slow compute down, and huge counts crash
  // the OpenMP runtime (SIGSEGV in libgomp at 100000).
  if (opt.threads < 0 || opt.threads > MaxThreads())
    throw UsageError("--threads " + std::to_string(opt.threads) + ": must be 1 to " + std::to_string(MaxThreads()) +
                     " (4 x the " + std::to_string(MaxThreads() / 4) + " online cores), or 0 for all cores");
  if (opt.context < 1) throw UsageError("--context must be >= 1");
  if (opt.prefill_chunk < 1) throw UsageError("prefill_chunk must be >= 1");
  if (opt.inflight < 1 || opt.inflight > 1024) throw UsageError("--inflight must be in [1, 1024]");
  if (opt.expert_inputs != "f32" && opt.expert_inputs != "bf16")
    throw UsageError("--expert-inputs: '" + opt.expert_inputs + "' is not f32 or bf16");
  if (!opt.expert_server.empty() && opt.expert_server.find("://") == std::string::npos)
    throw UsageError("expert_server: '" + opt.expert_server + "' is not an endpoint like tcp://HOST:PORT");
  if (!(opt.expert_server_timeout >= 0.1 && opt.expert_server_timeout <= 86400))
    throw UsageError("expert_server_timeout must be between 0.1 and 86400 seconds");
  if (opt.io != "direct" && opt.io != "pread" && opt.io != "uring" && opt.io != "mmap")
    throw UsageError("--io: unknown backend '" + opt.io + "' (direct, pread, uring, mmap)");
}

}  // namespace k3::launch
