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
#include "common/ipc/curve.h"
#include "common/id_list.h"
#include "common/loopback.h"
#include "common/sampling_check.h"
#include "common/sampling_flags.h"
#include "common/plan/memory_plan.h"
#include "common/cli_parse.h"

namespace k3::launch {
namespace {

std::string ResolvePath(const std::string& base_dir, const std::string& p) {
  if (p.empty() || std::filesystem::path(p).is_absolute() || base_dir.empty()) return p;
  return (std::filesystem::path(base_dir) / p).lexically_normal().string();
}

}  // namespace

int64_t PrefixCacheFor(const LaunchOptions& opt, bool several_requests) {
  const int64_t v = plan::ParsePrefixCache(opt.prefix_cache, "prefix_cache", true);
  if (v != plan::kPrefixCacheAuto) return v;
  return several_requests ? plan::kPrefixCacheAuto : 0;
}

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
    auto number = [&]() {  // sampling parameters are floats on the wire
      if (!node.is_number()) throw bad("a number");
      return static_cast<float>(*node.value<double>());
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
    else if (k == "trunk_piece") opt.trunk_piece = node.is_integer() ? std::to_string(integer()) : str();
    else if (k == "read_ahead") opt.read_ahead = node.is_integer() ? std::to_string(integer()) : str();
    else if (k == "threads") opt.threads = small_int();
    else if (k == "expert_inputs") opt.expert_inputs = str();
    else if (k == "expert_server") {  // one endpoint, or a list of them
      opt.expert_server.clear();
      if (const toml::array* arr = node.as_array()) {
        for (const toml::node& e : *arr) {
          if (!e.is_string()) throw bad("an endpoint string or a list of them");
          opt.expert_server.push_back(std::string(*e.value<std::string>()));
        }
      } else if (node.is_string()) {
        opt.expert_server.push_back(str());
      } else {
        throw bad("an endpoint string or a list of them");
      }
    } else if (k == "expert_slots") opt.expert_slots = integer();
    else if (k == "client_key") opt.client_key = ResolvePath(base_dir, str());
    else if (k == "expert_server_key") {
      opt.expert_server_key.clear();
      if (node.is_string()) {
        opt.expert_server_key.push_back(ResolvePath(base_dir, str()));
      } else if (const toml::array* arr = node.as_array()) {
        for (const toml::node& e : *arr) {
          if (!e.is_string()) throw bad("a certificate path or a list of them");
          opt.expert_server_key.push_back(ResolvePath(base_dir, std::string(*e.value<std::string>())));
        }
      } else {
        throw bad("a certificate path or a list of them");
      }
    } else if (k == "manifest") opt.manifest = ResolvePath(base_dir, str());
    else if (k == "no_verify") {
      if (!node.is_boolean()) throw bad("true or false");
      opt.no_verify = *node.value<bool>();
    } else if (k == "inflight") opt.inflight = small_int();
    else if (k == "max_pinned_trunk") opt.max_pinned_trunk = integer();
    else if (k == "spec") opt.spec = integer();
    else if (k == "max_batch") opt.max_batch = small_int();
    else if (k == "prefix_cache") opt.prefix_cache = node.is_integer() ? std::to_string(integer()) : str();
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
    } else if (k == "stop") {
      const toml::array* arr = node.as_array();
      if (!arr) throw bad("a list of strings");
      opt.stop.clear();
      for (const toml::node& e : *arr) {
        if (!e.is_string() || e.value<std::string>()->empty()) throw bad("a list of non-empty strings");
        opt.stop.push_back(*e.value<std::string>());
      }
    } else if (k == "ignore_eos") {
      if (!node.is_boolean()) throw bad("true or false");
      opt.ignore_eos = *node.value<bool>();
    } else if (k == "chat" || k == "no_think") {
      if (!node.is_boolean()) throw bad("true or false");
      (k == "chat" ? opt.chat : opt.no_think) = *node.value<bool>();
    } else if (k == "system") opt.system = str();
    else if (k == "thinking_effort") {
      opt.thinking_effort = str();
      opt.thinking_effort_given = true;
    } else if (k == "out") opt.out = str();
    else if (k == "save_state") opt.save_state = str();  // an output, like out
    else if (k == "load_state") opt.load_state = ResolvePath(base_dir, str());
    // Sampling and scoring (docs/sampling.md); ranges in CheckOptions.
    else if (k == "temperature") opt.sampling.temperature = number();
    else if (k == "top_p") opt.sampling.top_p = number();
    else if (k == "min_p") opt.sampling.min_p = number();
    else if (k == "repeat_penalty") opt.sampling.repeat_penalty = number();
    else if (k == "presence_penalty") opt.sampling.presence_penalty = number();
    else if (k == "frequency_penalty") opt.sampling.frequency_penalty = number();
    else if (k == "top_k") opt.sampling.top_k = small_int();
    else if (k == "repeat_last_n") opt.sampling.repeat_last_n = small_int();
    else if (k == "logprobs") opt.logprobs = small_int();
    else if (k == "seed") {
      const int64_t v = integer();
      if (v < 0) throw bad("a non-negative integer");
      opt.sampling.seed = static_cast<uint64_t>(v);
      opt.seed_given = true;
    } else if (k == "serve") opt.serve = str();
    else if (k == "api_key") opt.api_key = str();
    else if (k == "insecure") {
      if (!node.is_boolean()) throw bad("true or false");
      opt.insecure = *node.value<bool>();
    } else if (k == "served_model_name") opt.served_model_name = str();
    else if (k == "queue_size") opt.queue_size = integer();
    else if (k == "http_threads") opt.http_threads = integer();
    else if (k == "max_body_bytes") opt.max_body_bytes = integer();
    else if (k == "perplexity") {
      if (!node.is_boolean()) throw bad("true or false");
      opt.perplexity = *node.value<bool>();
    } else throw UsageError(source_name + ": unknown key '" + k + "'");
  }
}

std::optional<LaunchOptions> ParseLaunchOptions(int argc, char** argv) {
  LaunchOptions cli;
  CLI::App app{"k3-launch: run Kimi K3 as a pipeline of services within a memory budget"};
  app.add_option("config", cli.config_path, "TOML configuration (configs/*.toml)")->required();
  app.add_option("--budget", cli.budget, "memory budget for everything: 8G, 32G, 128G, auto");
  app.add_option("--model", cli.model, "checkpoint directory (overrides the TOML)");
  auto* prompt = app.add_option("--prompt", cli.prompt, "prompt text (needs a tokenizer)");
  auto* prompt_file = app.add_option("--prompt-file", cli.prompt_file, "prompt text file");
  auto* ids = app.add_option("--ids", cli.ids, "prompt token ids, comma separated");
  prompt->excludes(prompt_file)->excludes(ids);
  prompt_file->excludes(ids);
  app.add_option("--gen", cli.gen, "tokens to generate (greedy unless --temperature > 0)");
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
  std::vector<std::string> stop_id;
  app.add_option("--stop-id", stop_id, "a token id that ends generation after being emitted (repeatable)")
      ->allow_extra_args(false);
  app.add_option("--stop", cli.stop,
                 "text that ends generation when the decoded output shows it; left out of the text (repeatable; "
                 "needs a tokenizer)")
      ->allow_extra_args(false);
  app.add_flag("--ignore-eos", cli.ignore_eos,
               "do not stop at the model's end ids (config.json eos_token_id, [EOS], <|end_of_msg|>): run to --gen");
  app.add_option("--spec", cli.spec,
                 "speculative decoding: up to N n-gram drafts verified in one forward pass, 0 to " +
                     std::to_string(plan::kMaxSpecDrafts) + " (same ids as 0; TOML: spec)");
  app.add_option("--max-batch", cli.max_batch,
                 "sequences compute decodes together in one pass over the weights, 1 to " +
                     std::to_string(plan::kMaxBatch) + " (the plan reserves state for each; TOML: max_batch)");
  app.add_option("--prefix-cache", cli.prefix_cache,
                 "compute's prefix-snapshot cache: a size (512M), 0 = off, or auto (default: a share of the budget "
                 "above the floor with --serve, where many requests reach compute; off for one prompt or a chat) (TOML: "
                 "prefix_cache)");
  app.add_flag("--quiet", cli.quiet, "stderr: only errors and the final summary (no progress or service lines)");
  app.add_option("--inflight", cli.inflight, "reads in flight per reader service and per expert server (default 4)");
  app.add_option("--dump-cache-trace", cli.dump_cache_trace, "directory for the expert fetcher's cache trace");
  app.add_flag("--dry-run", cli.dry_run, "print the memory plan and exit");
  app.add_option("--trunk-piece", cli.trunk_piece,
                 "trunk ring slot size: a size (64M, default) or \"layer\" (whole-layer slots); larger layers stream in pieces");
  app.add_option("--read-ahead", cli.read_ahead, "trunk bytes read ahead of compute when layers stream in pieces (default 128M)");
  app.add_option("--expert-server", cli.expert_server,
                 "read routed experts from the k3-expert-server at this endpoint (tcp://HOST:PORT); repeat for "
                 "several servers (TOML: a string or a list)");
  app.add_option("--expert-slots", cli.expert_slots,
                 "cap the expert slots below what the budget allows (experiments: force misses on small models)");
  app.add_option("--expert-server-key", cli.expert_server_key,
                 "the expert servers' public certificate (CURVE); one for all servers, or repeated in "
                 "--expert-server order");
  app.add_option("--client-key", cli.client_key, "this client's NAME_secret certificate for the expert servers (CURVE)");
  app.add_option("--manifest", cli.manifest,
                 "expert manifest the experts from --expert-server are checked against (default: "
                 "k3-manifest.json in the model directory; k3-model digest writes it)");
  app.add_flag("--no-verify", cli.no_verify, "do not check experts from --expert-server against a manifest");
  bool no_hints = false;
  app.add_flag("--no-prefetch-hints", no_hints, "do not send next-layer expert guesses to the fetcher");
  app.add_flag("--probe-membw", cli.probe_membw,
               "benchmarks: compute times one read of the resident weights after every decode step");
  app.add_option("--save-state", cli.save_state,
                 "after the run, write compute's state (KDA, MLA cache, ids) to this file");
  app.add_option("--load-state", cli.load_state,
                 "continue the state in this file: the prompt's ids are appended to its sequence");
  SamplingFlags sf;
  AddSamplingFlags(app, sf);
  app.add_flag("--chat", cli.chat, "interactive chat in the terminal (docs/chat.md; needs a tokenizer)");
  app.add_option("--system", cli.system, "chat: the system message");
  app.add_option("--thinking-effort", cli.thinking_effort, "chat: thinking effort low, high or max (default max)");
  app.add_flag("--no-think", cli.no_think, "chat: no thinking channel, the answer only");
  app.add_option("--serve", cli.serve,
                 "serve OpenAI-compatible HTTP at HOST:PORT instead of one prompt (docs/server.md; needs a tokenizer)");
  app.add_option("--api-key", cli.api_key,
                 "serve: clients must send 'Authorization: Bearer KEY' (needed for a non-loopback address)");
  app.add_flag("--insecure", cli.insecure, "serve: allow a non-loopback address without --api-key");
  app.add_option("--served-model-name", cli.served_model_name, "serve: the model id (default: the model directory's name)");
  app.add_option("--queue-size", cli.queue_size, "serve: requests that may wait for the batch (default 16); more: 429");
  app.add_option("--http-threads", cli.http_threads,
                 "serve: HTTP connection threads (default max_batch + queue_size + 4); more connections: 429");
  app.add_option("--max-body-bytes", cli.max_body_bytes, "serve: largest request body in bytes (default 1 MiB); larger: 413");
  if (!ParseCommandLine(app, argc, argv, "k3-launch")) return std::nullopt;  // --help, --version

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
  if (given("--expert-server-key")) opt.expert_server_key = cli.expert_server_key;
  if (given("--client-key")) opt.client_key = cli.client_key;
  if (given("--expert-slots")) opt.expert_slots = cli.expert_slots;
  if (given("--trunk-piece")) opt.trunk_piece = cli.trunk_piece;
  if (given("--read-ahead")) opt.read_ahead = cli.read_ahead;
  if (given("--spec")) opt.spec = cli.spec;
  if (given("--max-batch")) opt.max_batch = cli.max_batch;
  if (given("--prefix-cache")) opt.prefix_cache = cli.prefix_cache;
  if (given("--stop-ids") || given("--stop-id")) {  // both flags add up; together they replace the TOML's
    opt.stop_ids.clear();
    if (given("--stop-ids"))
      for (int64_t id : k3::ParseIdList(stop_ids, "--stop-ids", int64_t{INT32_MAX} + 1))
        opt.stop_ids.push_back(static_cast<int32_t>(id));
    for (const std::string& one : stop_id) {
      const std::vector<int64_t> v = k3::ParseIdList(one, "--stop-id", int64_t{INT32_MAX} + 1);
      if (v.size() != 1) throw UsageError("--stop-id takes one id ('" + one + "'); use --stop-ids for a list");
      opt.stop_ids.push_back(static_cast<int32_t>(v[0]));
    }
  }
  if (given("--save-state")) opt.save_state = cli.save_state;
  if (given("--load-state")) opt.load_state = cli.load_state;
  if (given("--stop")) opt.stop = cli.stop;
  if (cli.ignore_eos) opt.ignore_eos = true;
  if (cli.quiet) opt.quiet = true;
  if (cli.chat) opt.chat = true;
  if (given("--system")) opt.system = cli.system;
  if (given("--thinking-effort")) {
    opt.thinking_effort = cli.thinking_effort;
    opt.thinking_effort_given = true;
  }
  if (cli.no_think) opt.no_think = true;
  if (given("--serve")) opt.serve = cli.serve;
  if (given("--api-key")) opt.api_key = cli.api_key;
  if (cli.insecure) opt.insecure = true;
  if (given("--served-model-name")) opt.served_model_name = cli.served_model_name;
  if (given("--queue-size")) opt.queue_size = cli.queue_size;
  if (given("--http-threads")) opt.http_threads = cli.http_threads;
  if (given("--max-body-bytes")) opt.max_body_bytes = cli.max_body_bytes;
  opt.dry_run = cli.dry_run;
  if (no_hints) opt.prefetch_hints = false;
  opt.probe_membw = cli.probe_membw;
  {  // sampling flags given on the command line win over the TOML
    ipc::compute::Sampling& to = opt.sampling;
    const ipc::compute::Sampling& from = sf.sampling;
    if (sf.Given("--temperature")) to.temperature = from.temperature;
    if (sf.Given("--top-k")) to.top_k = from.top_k;
    if (sf.Given("--top-p")) to.top_p = from.top_p;
    if (sf.Given("--min-p")) to.min_p = from.min_p;
    if (sf.Given("--repeat-penalty")) to.repeat_penalty = from.repeat_penalty;
    if (sf.Given("--repeat-last-n")) to.repeat_last_n = from.repeat_last_n;
    if (sf.Given("--presence-penalty")) to.presence_penalty = from.presence_penalty;
    if (sf.Given("--frequency-penalty")) to.frequency_penalty = from.frequency_penalty;
    if (sf.Given("--seed")) to.seed = from.seed, opt.seed_given = true;
    if (sf.Given("--logprobs")) opt.logprobs = sf.logprobs;
    if (sf.perplexity) opt.perplexity = true;
    if (!opt.seed_given) opt.sampling.seed = RandomSeed();
  }

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
  for (const std::string& s : opt.stop)
    if (s.empty()) throw UsageError("--stop: the text must not be empty");
  if (opt.prefill_chunk < 1) throw UsageError("prefill_chunk must be >= 1");
  if (opt.spec < 0 || opt.spec > plan::kMaxSpecDrafts)
    throw UsageError("--spec " + std::to_string(opt.spec) + ": must be 0 to " + std::to_string(plan::kMaxSpecDrafts));
  if (opt.max_batch < 1 || opt.max_batch > plan::kMaxBatch)
    throw UsageError("--max-batch " + std::to_string(opt.max_batch) + ": must be 1 to " + std::to_string(plan::kMaxBatch));
  if (opt.spec > 0 && opt.full_recompute) throw UsageError("--spec needs incremental decoding, not full_recompute");
  (void)plan::ParsePrefixCache(opt.prefix_cache, "prefix_cache", true);  // exit 2 naming it
  if (opt.inflight < 1 || opt.inflight > 1024) throw UsageError("--inflight must be in [1, 1024]");
  if (opt.expert_inputs != "f32" && opt.expert_inputs != "bf16")
    throw UsageError("--expert-inputs: '" + opt.expert_inputs + "' is not f32 or bf16");
  for (size_t i = 0; i < opt.expert_server.size(); ++i) {
    const std::string& ep = opt.expert_server[i];
    if (ep.find("://") == std::string::npos)
      throw UsageError("expert_server: '" + ep + "' is not an endpoint like tcp://HOST:PORT");
    for (size_t j = 0; j < i; ++j)
      if (opt.expert_server[j] == ep) throw UsageError("expert_server: '" + ep + "' is given twice");
  }
  if (opt.expert_server.size() > kMaxExpertServers)
    throw UsageError("expert_server: at most " + std::to_string(kMaxExpertServers) + " servers, not " +
                     std::to_string(opt.expert_server.size()));
  if (opt.expert_slots != -1 && opt.expert_slots < 1)
    throw UsageError("--expert-slots must be a positive number of slots");
  if (!opt.expert_server_key.empty() || !opt.client_key.empty()) {
    if (opt.expert_server.empty()) throw UsageError("--expert-server-key / --client-key need --expert-server");
    if (opt.client_key.empty()) throw UsageError("--expert-server-key needs --client-key (this client's NAME_secret)");
    if (opt.expert_server_key.empty())
      throw UsageError("--client-key needs --expert-server-key (the server's public certificate)");
    if (opt.expert_server_key.size() != 1 && opt.expert_server_key.size() != opt.expert_server.size())
      throw UsageError("--expert-server-key: give one certificate for all servers, or one per --expert-server");
    for (const std::string& cert : opt.expert_server_key) (void)ipc::ReadClientKeys(opt.client_key, cert);  // exit 7
  }
  if (!(opt.expert_server_timeout >= 0.1 && opt.expert_server_timeout <= 86400))
    throw UsageError("expert_server_timeout must be between 0.1 and 86400 seconds");
  if (opt.io != "direct" && opt.io != "pread" && opt.io != "uring" && opt.io != "mmap")
    throw UsageError("--io: unknown backend '" + opt.io + "' (direct, pread, uring, mmap)");
  if (const std::string bad = SamplingProblem(opt.sampling, opt.logprobs); !bad.empty()) throw UsageError(bad);
  if (opt.thinking_effort != "low" && opt.thinking_effort != "high" && opt.thinking_effort != "max")
    throw UsageError("--thinking-effort: '" + opt.thinking_effort + "' is not low, high or max");
  if (opt.no_think && opt.thinking_effort_given)
    throw UsageError("--no-think and --thinking-effort contradict each other");
  if (!opt.chat && !opt.system.empty()) throw UsageError("--system needs --chat");
  if (!opt.chat && opt.serve.empty() && (opt.no_think || opt.thinking_effort_given))
    throw UsageError("--thinking-effort and --no-think need --chat or --serve");
  if (opt.chat && (!opt.prompt.empty() || !opt.prompt_file.empty() || !opt.ids.empty()))
    throw UsageError("--chat takes its prompts from the terminal: no --prompt, --prompt-file or --ids");
  if (opt.serve.empty()) {
    if (!opt.api_key.empty() || opt.insecure || !opt.served_model_name.empty())
      throw UsageError("--api-key, --insecure and --served-model-name need --serve");
    return;
  }
  if (opt.chat || !opt.prompt.empty() || !opt.prompt_file.empty() || !opt.ids.empty())
    throw UsageError("--serve takes its prompts over HTTP: no --chat, --prompt, --prompt-file or --ids");
  if (!opt.save_state.empty() || !opt.load_state.empty() || opt.perplexity || opt.logprobs >= 0 || !opt.out.empty())
    throw UsageError("--serve has no --save-state, --load-state, --perplexity, --logprobs or --out (requests ask for logprobs)");
  const size_t colon = opt.serve.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == opt.serve.size() ||
      opt.serve.find_first_not_of("0123456789", colon + 1) != std::string::npos || opt.serve.size() - colon > 6 ||
      std::stol(opt.serve.substr(colon + 1)) > 65535)
    throw UsageError("--serve '" + opt.serve + "': want HOST:PORT (port 0 to 65535)");
  if (!opt.api_key.empty() && opt.insecure) throw UsageError("--insecure and --api-key exclude each other");
  if (opt.api_key.empty() && !opt.insecure && !IsLoopbackHost(opt.serve.substr(0, colon)))
    throw UsageError("--serve " + opt.serve + " is reachable from other machines: pass --api-key, or --insecure");
  if (opt.queue_size < 0 || opt.queue_size > (1 << 20)) throw UsageError("queue_size must be 0 to 1048576");
  if (opt.http_threads < 0 || opt.http_threads > 4096) throw UsageError("http_threads must be 0 (automatic) to 4096");
  if (opt.max_body_bytes < 1024) throw UsageError("max_body_bytes must be at least 1024");
}

}  // namespace k3::launch
