#include "option_table.h"

#include <cstdio>

#include "common/plan/memory_plan.h"
#include "common/sampling_params.h"

// A row names only the fields it needs; the rest keep OptionSpec's defaults.
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
// GCC 12 warns falsely on "literal" + std::string&& (its bug 105329).
#pragma GCC diagnostic ignored "-Wrestrict"

namespace k3::launch {
namespace {

using T = OptionType;
constexpr unsigned kWeights = kToTrunkReader | kToExpertFetcher;

// A field of LaunchOptions, as the table reaches it.
#define K3_FIELD(member) [](LaunchOptions& o) -> FieldRef { return &o.member; }

std::string Mib(int64_t bytes) { return std::to_string(bytes >> 20) + "M"; }

std::vector<OptionSpec> MakeTable() {
  std::vector<OptionSpec> t = {
      {"model", T::kPath, K3_FIELD(model), "DIR", "checkpoint directory",
       kWeights | kToCompute | kToServer},
      {"tokenizer", T::kPath, K3_FIELD(tokenizer), "DIR",
       "tokenizer directory (tiktoken.model, tokenizer_config.json)", kToTokenizer,
       "the model directory, if it holds tiktoken.model"},
      {"budget", T::kSize, K3_FIELD(budget), "SIZE",
       "memory budget for everything: bytes, a size with a binary suffix (8G, 512M, 1.5T, 32GiB), or auto "
       "(MemAvailable); required",
       0},
      {"io", T::kString, K3_FIELD(io), "BACKEND", "trunk and expert read backend: direct, pread, uring or mmap",
       kWeights},
      {"prompt", T::kString, K3_FIELD(prompt), "TEXT", "prompt text (needs a tokenizer)", 0, "", "prompt"},
      {"prompt_file", T::kPath, K3_FIELD(prompt_file), "FILE", "prompt text file (needs a tokenizer)", 0, "",
       "prompt"},
      {"ids", T::kString, K3_FIELD(ids), "L,L,...", "prompt token ids, comma separated", 0, "", "prompt"},
      {"gen", T::kInt, K3_FIELD(gen), "N", "tokens to generate (one prompt; not a chat reply: reply_limit)", 0},
      {"context", T::kInt, K3_FIELD(context), "N",
       "context length the plan reserves (at most config.json's max_position_embeddings)", kToServer},
      {"prefill_chunk", T::kInt, K3_FIELD(prefill_chunk), "N",
       "cap on the prompt tokens per prefill chunk; the memory plan chooses the chunk up to it (docs/memory-plan.md, "
       "Prefill chunk)",
       kToCompute | kToServer, "0 (no cap: up to the context)"},
      {"ring_slots", T::kInt, K3_FIELD(ring_slots), "N",
       "trunk ring slots, at least 2 (0: the plan's rule, docs/memory-plan.md)", 0},
      {"trunk_piece", T::kSize, K3_FIELD(trunk_piece), "SIZE",
       "trunk ring slot size: a size, or layer (whole-layer slots); larger layers stream in pieces", 0,
       Mib(plan::kTrunkPieceBytes)},
      {"read_ahead", T::kSize, K3_FIELD(read_ahead), "SIZE",
       "trunk bytes read ahead of compute when layers stream in pieces", 0, Mib(plan::kTrunkReadAhead)},
      {"threads", T::kInt, K3_FIELD(threads), "N", "compute threads, 1 to 4 x online CPUs (0: all cores)",
       kToCompute},
      {"expert_inputs", T::kString, K3_FIELD(expert_inputs), "f32|bf16",
       "routed-expert inputs: f32 (exact) or bf16 (rounded, faster)", kToCompute},
      {"inflight", T::kInt, K3_FIELD(inflight), "N",
       "reads in flight per reader service and, with expert_server, per expert server", kWeights},
      {"dump_cache_trace", T::kOutput, K3_FIELD(dump_cache_trace), "DIR",
       "directory for the expert fetcher's cache trace (expert_hist.json, expert_trace.bin)", kToExpertFetcher},
      {"max_pinned_trunk", T::kInt, K3_FIELD(max_pinned_trunk), "BYTES", "cap on the pinned trunk bytes (-1: none)",
       0},
      {"full_recompute", T::kBool, K3_FIELD(full_recompute), "",
       "re-run the whole sequence every step (tests; not with spec)", 0},
      {"spec", T::kInt, K3_FIELD(spec), "N",
       "speculative decoding: up to N n-gram drafts verified in one forward pass, 0 to " +
           std::to_string(plan::kMaxSpecDrafts) + " (the same ids as 0)",
       0},
      {"max_batch", T::kInt, K3_FIELD(max_batch), "N",
       "sequences compute decodes together in one pass over the weights, 1 to " +
           std::to_string(plan::kMaxBatch) + " (the plan reserves state for each; docs/pipeline.md, Batched steps)",
       kToCompute | kToServer},
      {"prefix_cache", T::kSize, K3_FIELD(prefix_cache), "SIZE",
       "compute's prefix-snapshot cache: a size (512M), 0 or off, or auto (a share of the budget above the floor "
       "when several requests reach compute, as with serve; off for one prompt or a chat)",
       kToCompute},
      {"prefix_store", T::kPath, K3_FIELD(prefix_store), "DIR",
       "persistent prefix store: prompt snapshots on disk in DIR, shared by every run of the model and the server; "
       "a prompt that starts with a stored prefix starts from it, the same ids (docs/pipeline.md, Prefix store)",
       kToCompute},
      {"prefix_store_size", T::kSize, K3_FIELD(prefix_store_size), "SIZE",
       "the prefix store's entries are kept under this size, least recently used evicted first", kToCompute},
      {"prefix_store_interval", T::kInt, K3_FIELD(prefix_store_interval), "N",
       "a long prompt is also snapshotted into the prefix store every N ids, rounded up to whole prefill chunks "
       "(0: only at its end)",
       kToCompute},
      {"prefetch_hints", T::kBool, K3_FIELD(prefetch_hints), "",
       "compute guesses each next layer's experts for the fetcher where that pays (docs/pipeline.md, Next-layer "
       "expert hints)",
       kToCompute},
      {"expert_server", T::kStrings, K3_FIELD(expert_server), "EP",
       "read routed experts from the k3-expert-server at this endpoint (tcp://HOST:PORT); repeat for several "
       "servers, at most " +
           std::to_string(kMaxExpertServers),
       kToExpertFetcher},
      {"expert_server_timeout", T::kNumber, K3_FIELD(expert_server_timeout), "S",
       "seconds without an answer before a remote read fails, 0.1 to 86400 (a silent server among several is "
       "dropped after half of it, at most 10 s)",
       kToExpertFetcher},
      {"expert_server_key", T::kPaths, K3_FIELD(expert_server_key), "CERT",
       "the expert servers' public certificate (CURVE): one for all servers, or one per expert_server in its order",
       kToExpertFetcher},
      {"client_key", T::kPath, K3_FIELD(client_key), "NAME_secret",
       "this client's secret certificate for the expert servers (CURVE)", kToExpertFetcher},
      {"coded_trunk", T::kPath, K3_FIELD(coded_trunk), "DIR",
       "coded trunk (k3-model pack-trunk) of the model: whole streamed trunk layers are read from it and decoded "
       "(docs/pipeline.md, Coded trunk)",
       kToTrunkReader, "none: the release's bf16 bytes"},
      {"manifest", T::kPath, K3_FIELD(manifest), "PATH",
       "expert manifest the remote experts are checked against (k3-model digest writes it)", kToExpertFetcher,
       "k3-manifest.json in the model directory"},
      {"no_verify", T::kBool, K3_FIELD(no_verify), "", "remote experts are not checked against a manifest",
       kToExpertFetcher},
      {"expert_slots", T::kInt, K3_FIELD(expert_slots), "N",
       "cap on the expert slots below what the budget gives, at least top_k (experiments: force misses; -1: none)",
       0},
      {"stop_ids", T::kIds, K3_FIELD(stop_ids), "L,L,...",
       "token ids that end generation after being emitted; --stop-ids and the repeatable --stop-id add up and "
       "replace the TOML's list; the model's end ids are added unless ignore_eos",
       kToServer, "", "", "--stop-id"},
      {"stop", T::kTexts, K3_FIELD(stop), "TEXT",
       "text that ends generation when the decoded output shows it, across token boundaries; left out of the text "
       "(needs a tokenizer)",
       0},
      {"ignore_eos", T::kBool, K3_FIELD(ignore_eos), "",
       "do not stop at the model's end ids (config.json eos_token_id, the tokenizer's [EOS] and <|end_of_msg|>): "
       "run to gen",
       0},
      {"quiet", T::kBool, K3_FIELD(quiet), "", "stderr: only errors and the final summary (no progress or service lines)",
       0},
      {"dry_run", T::kBool, K3_FIELD(dry_run), "", "print the memory plan and the price of a token in bytes read, and exit",
       0},
      {"json", T::kBool, K3_FIELD(json), "", "with dry_run: print the plan and the price as one JSON object", 0},
      {"disk_rate", T::kString, K3_FIELD(disk_rate), "RATE",
       "dry run: price tokens in seconds at this disk rate (3.2GB/s, 800MB/s), or probe (a short O_DIRECT read of "
       "the model's shards)",
       0, "none"},
      {"prompt_tokens", T::kInt, K3_FIELD(prompt_tokens), "N",
       "dry run: the prompt length the time to first token is priced for", 0, "the length of --ids, else none"},
      {"out", T::kOutput, K3_FIELD(out), "FILE",
       "the run report (JSON); with serve, where it serves once ready (url, host, port, model, pid)", 0},
      {"dump_logits", T::kOutput, K3_FIELD(dump_logits), "FILE", "float32 logits choosing the first token",
       kToCompute},
      {"probe_membw", T::kBool, K3_FIELD(probe_membw), "",
       "benchmarks: compute times one read of the resident weights after every decode step", kToCompute},
      {"ready_timeout", T::kNumber, K3_FIELD(ready_timeout), "S",
       "seconds to wait for every service's Ready, 0.1 to 86400", 0},
      {"shutdown_timeout", T::kNumber, K3_FIELD(shutdown_timeout), "S",
       "seconds between Shutdown and SIGTERM, 0 to 3600", 0},
      {"save_state", T::kOutput, K3_FIELD(save_state), "FILE",
       "after the run, write compute's state (KDA, MLA cache, ids) to this file (docs/formats.md, State file)", 0},
      {"load_state", T::kPath, K3_FIELD(load_state), "FILE",
       "continue the state in this file: the prompt's ids are appended to its sequence", 0},
  };
  for (const SamplingParam& p : kSamplingParams) {
    OptionSpec s{p.key, p.real ? T::kNumber : T::kInt, nullptr, p.real ? "X" : "N",
                 std::string(p.help) + " (docs/sampling.md)", kToServer};
    if (p.real) s.field = [m = p.real](LaunchOptions& o) -> FieldRef { return &(o.sampling.*m); };
    else s.field = [m = p.integer](LaunchOptions& o) -> FieldRef { return &(o.sampling.*m); };
    t.push_back(std::move(s));
  }
  const std::vector<OptionSpec> rest = {
      {"seed", T::kSeed, K3_FIELD(sampling.seed), "S", kSeedHelp, 0, "random", "", "",
       [](LaunchOptions& o) { return &o.seed_given; }},
      {"logprobs", T::kInt, K3_FIELD(logprobs), "N", kLogprobsHelp, 0, "off (-1)"},
      {"perplexity", T::kBool, K3_FIELD(perplexity), "", kPerplexityHelp, 0},
      {"chat", T::kBool, K3_FIELD(chat), "", "interactive chat in the terminal (docs/chat.md; needs a tokenizer)", 0},
      {"system", T::kString, K3_FIELD(system), "TEXT", "chat: the system message", 0},
      {"reply_limit", T::kInt, K3_FIELD(reply_limit), "N",
       "chat: the most ids one reply may have (a reply runs to its end id or the context; gen is not used)", 0,
       "none (0)"},
      {"thinking_effort", T::kString, K3_FIELD(thinking_effort), "low|high|max",
       "chat and serve: the thinking effort (not with no_think)", kToServer, "", "", "",
       [](LaunchOptions& o) { return &o.thinking_effort_given; }},
      {"no_think", T::kBool, K3_FIELD(no_think), "", "chat and serve: no thinking channel, the answer only",
       kToServer},
      {"input_history", T::kOutput, K3_FIELD(input_history), "FILE|off",
       "chat on a terminal: the typed lines Up recalls, kept across sessions (one JSON string per line; off: none)",
       0, "$XDG_STATE_HOME/k3/chat-input-history.jsonl (~/.local/state/k3/...)"},
      {"connect", T::kString, K3_FIELD(connect), "URL",
       "chat or prompt through a running k3-launch --serve at URL (http://HOST:PORT) instead of starting the "
       "services (docs/chat.md, A running server)",
       0},
      {"serve", T::kString, K3_FIELD(serve), "HOST:PORT",
       "serve OpenAI-compatible HTTP at HOST:PORT instead of one prompt (docs/server.md; needs a tokenizer)",
       kToServer},
      {"api_key", T::kString, K3_FIELD(api_key), "KEY",
       "serve: clients must send Authorization: Bearer KEY (needed for a non-loopback address; default "
       "$K3_API_KEY; a KEY on the command line is overwritten in it once read; only k3-server gets the key, in "
       "its environment); connect: the key sent to the server",
       0},
      {"api_key_file", T::kPath, K3_FIELD(api_key_file), "FILE",
       "serve and connect: read api_key from FILE, one line, which only its owner may read (mode 600), so the key "
       "is on no command line and in no config; not with api_key",
       0},
      {"insecure", T::kBool, K3_FIELD(insecure), "", "serve: allow a non-loopback address without api_key",
       kToServer},
      {"allowed_hosts", T::kStrings, K3_FIELD(allowed_hosts), "NAME",
       "serve without api_key: a further Host name clients may use (repeat; * for any); by default only the serve "
       "host, its address, localhost, 127.0.0.1 and ::1 (others: 403, against DNS rebinding)",
       kToServer},
      {"served_model_name", T::kString, K3_FIELD(served_model_name), "NAME", "serve: the model id clients name",
       kToServer, "the model directory's name"},
      {"queue_size", T::kInt, K3_FIELD(queue_size), "N",
       "serve: requests that may wait for a place in the batch, 0 to 1048576; more: 429", kToServer},
      {"http_threads", T::kInt, K3_FIELD(http_threads), "N",
       "serve: HTTP connection threads, up to 4096; more connections: 429", kToServer,
       "max_batch + queue_size + 4 (0)"},
      {"max_body_bytes", T::kInt, K3_FIELD(max_body_bytes), "N",
       "serve: largest request body in bytes, at least 1024; larger: 413", kToServer},
      {"max_tokens_default", T::kInt, K3_FIELD(max_tokens_default), "N",
       "serve: generated tokens for a request without max_tokens (at most max_tokens_limit)", kToServer,
       "0 (max_tokens_limit, or up to the context)"},
      {"max_tokens_limit", T::kInt, K3_FIELD(max_tokens_limit), "N",
       "serve: the most generated tokens a request may ask for; more: 400", kToServer, "0 (no limit)"},
      {"tokenizer_timeout", T::kNumber, K3_FIELD(tokenizer_timeout), "SECONDS",
       "serve: a prompt the tokenizer has not encoded in this time fails with 504 (and /health is 503 until it "
       "answers again), 0.1 to 86400",
       kToServer},
      {"compute_timeout", T::kNumber, K3_FIELD(compute_timeout), "SECONDS",
       "serve: /health is 503 when compute leaves a liveness ping unanswered this long and 4x its longest pass "
       "(a stopped or wedged compute), 0.1 to 86400",
       kToServer},
      {"queue_timeout", T::kNumber, K3_FIELD(queue_timeout), "SECONDS",
       "serve: a request still waiting for a place in the batch this long after it arrived is 503 with "
       "Retry-After, 0 (none) to 604800",
       kToServer},
      {"run_timeout", T::kNumber, K3_FIELD(run_timeout), "SECONDS",
       "serve: a request running in compute this long is ended with what it generated (finish_reason "
       "\"length\"), 0 (none) to 604800",
       kToServer, "0 (none)"},
  };
  t.insert(t.end(), rest.begin(), rest.end());
  return t;
}

#undef K3_FIELD

std::string Num(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%g", v);
  return b;
}

std::string Join(const std::vector<std::string>& v, const char* sep) {
  std::string s;
  for (const std::string& e : v) s += (s.empty() ? "" : sep) + e;
  return s;
}

}  // namespace

const std::vector<OptionSpec>& LaunchOptionTable() {
  static const std::vector<OptionSpec> table = MakeTable();
  return table;
}

const OptionSpec* FindLaunchOption(std::string_view key) {
  for (const OptionSpec& s : LaunchOptionTable())
    if (s.key == key) return &s;
  return nullptr;
}

std::string FlagOf(const OptionSpec& s) { return FlagOfKey(s.key); }

std::string NegationOf(const OptionSpec& s) {
  LaunchOptions d;
  if (s.type != OptionType::kBool || !*std::get<bool*>(s.field(d))) return "";
  return "--no-" + FlagOf(s).substr(2);
}

std::string ValueText(const OptionSpec& s, LaunchOptions& o) {
  return std::visit(
      [](auto* p) -> std::string {
        using V = std::remove_pointer_t<decltype(p)>;
        if constexpr (std::is_same_v<V, std::string>) return *p;
        else if constexpr (std::is_same_v<V, bool>) return *p ? "true" : "false";
        else if constexpr (std::is_floating_point_v<V>) return Num(*p);
        else if constexpr (std::is_integral_v<V>) return std::to_string(*p);
        else if constexpr (std::is_same_v<V, std::vector<std::string>>) return Join(*p, ",");
        else {
          std::vector<std::string> ids;
          for (int32_t id : *p) ids.push_back(std::to_string(id));
          return Join(ids, ",");
        }
      },
      s.field(o));
}

std::string DefaultText(const OptionSpec& s) {
  if (!s.default_text.empty()) return s.default_text;
  LaunchOptions d;
  if (s.type == OptionType::kBool) return *std::get<bool*>(s.field(d)) ? "on" : "off";
  const std::string v = ValueText(s, d);
  return v.empty() ? "none" : v;
}

std::string TypeText(OptionType t) {
  switch (t) {
    case T::kString: return "string";
    case T::kPath: return "path";
    case T::kOutput: return "path (an output)";
    case T::kSize: return "size or integer";
    case T::kInt: return "integer";
    case T::kNumber: return "number";
    case T::kBool: return "boolean";
    case T::kStrings: return "string or list of strings";
    case T::kPaths: return "path or list of paths";
    case T::kTexts: return "list of strings";
    case T::kIds: return "list of integers";
    case T::kSeed: return "integer >= 0";
  }
  return "?";
}

std::string ServicesText(unsigned services) {
  std::vector<std::string> v;
  const std::pair<unsigned, const char*> names[] = {{kToTrunkReader, "trunk-reader"},
                                                    {kToExpertFetcher, "expert-fetcher"},
                                                    {kToCompute, "compute"},
                                                    {kToTokenizer, "tokenizer"},
                                                    {kToServer, "server"}};
  for (const auto& [bit, name] : names)
    if (services & bit) v.push_back(name);
  return v.empty() ? "-" : Join(v, ", ");
}

std::string OptionTableMarkdown() {
  std::string md =
      "| key | flag | type | default | passed to | meaning |\n"
      "|---|---|---|---|---|---|\n";
  auto cell = [](std::string text) {  // a '|' would end the cell
    for (size_t i = 0; (i = text.find('|', i)) != std::string::npos; i += 2) text.insert(i, "\\");
    return text;
  };
  for (const OptionSpec& s : LaunchOptionTable()) {
    std::string flag = "`" + FlagOf(s) + (s.value.empty() ? "" : " " + s.value) + "`";
    if (!NegationOf(s).empty()) flag += ", `" + NegationOf(s) + "`";
    if (!s.one_flag.empty()) flag += ", `" + s.one_flag + " N`";
    md += "| `" + s.key + "` | " + cell(flag) + " | " + TypeText(s.type) + " | " + cell(DefaultText(s)) + " | " +
          ServicesText(s.services) + " | " + cell(s.help) + " |\n";
  }
  return md;
}

}  // namespace k3::launch
