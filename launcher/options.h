// k3-launch settings: a TOML file (configs/*.toml) overridden by command-line flags. Each field
// that is an option has one row in the option table (option_table.h: key, flag, type, help),
// which drives the TOML reader, the flags and the merge here; the defaults are these initializers.
// Unknown TOML keys and wrongly typed values are k3::Error(kExitUsage) naming the key.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/ipc/messages.h"

namespace k3::launch {

struct LaunchOptions {
  std::string config_path;   // the TOML file
  std::string model;         // checkpoint directory (relative paths: to the TOML's directory)
  std::string budget;        // "8G", "auto", ...
  std::string io = "pread";  // trunk/expert read backend
  std::string prompt, prompt_file, ids;
  std::string tokenizer;     // tokenizer directory (tiktoken.model + tokenizer_config.json)
  int64_t gen = 16;
  int64_t context = 4096;
  int64_t prefill_chunk = 0;  // cap on the plan's prefill chunk (0: none but the context)
  int ring_slots = 0;         // trunk ring slots (0: the plan's rule, docs/memory-plan.md)
  std::string trunk_piece;   // ring slot size: "64M", "layer" (empty: plan::kTrunkPieceBytes)
  std::string read_ahead;    // trunk read-ahead when layers stream in pieces (empty: plan::kTrunkReadAhead)
  int threads = 0;           // compute threads (0 = all cores; at most limits::MaxThreads())
  std::string expert_inputs = "f32";  // routed-expert inputs: "f32" (exact) or "bf16"
  int inflight = 4;          // reads in flight per service (--inflight of the readers)
  std::string dump_cache_trace;  // directory for the fetcher's expert_hist.json + expert_trace.bin
  int64_t max_pinned_trunk = -1;
  bool full_recompute = false;
  int64_t spec = 0;            // n-gram drafts per verify pass (Generate.spec; 0: none)
  int max_batch = 1;           // sequences compute decodes together (k3-compute --max-batch; the plan's batch-state)
  // Compute's prefix-snapshot cache (docs/pipeline.md "Prefix cache"): a size, "0", or "auto"
  // (a share of the budget above the floor when compute answers several requests, as with --serve;
  // PrefixCacheFor).
  std::string prefix_cache = "auto";
  // The persistent prefix store (docs/pipeline.md "Prefix store"): a directory ("" = off), the
  // cap on its entries, and the snapshot interval of long prompts (0: only at a prompt's end).
  std::string prefix_store;
  std::string prefix_store_size = "16G";
  int64_t prefix_store_interval = 4096;
  bool prefetch_hints = true;  // compute guesses each next layer's experts for the fetcher
  std::vector<std::string> expert_server;  // k3-expert-server endpoints (tcp://HOST:PORT): experts read there
  int64_t expert_slots = -1;   // cap on the plan's expert slots (experiments: force misses); -1 = none
  double expert_server_timeout = 60;  // seconds without an answer before a remote read fails
  // CURVE (docs/pipeline.md "Remote expert server"): the servers' public certificates (one for
  // all servers, or one per server in --expert-server order) and this client's NAME_secret.
  std::vector<std::string> expert_server_key;
  std::string client_key;
  std::string manifest;        // expert manifest (default: k3-manifest.json in the model directory)
  std::string coded_trunk;     // coded trunk directory (k3-model pack-trunk); empty: the release's bf16 bytes
  bool no_verify = false;      // experts from the expert server are not checked against a manifest
  std::string out, dump_logits;
  std::vector<int32_t> stop_ids;  // generation ends after emitting one of these (Generate.stop_ids)
  std::vector<std::string> stop;  // --stop TEXT: generation ends when the decoded text shows one
  bool ignore_eos = false;        // do not stop at the model's end ids (common/end_ids.h)
  bool quiet = false;             // only errors and the final summary on stderr
  bool dry_run = false;
  bool json = false;             // --dry-run --json: the plan and the price as one JSON object
  std::string disk_rate;         // dry run: bytes per second ("3.2GB/s"), "probe", or "" (no seconds)
  int64_t prompt_tokens = 0;     // dry run: the prompt priced for the first token (0: --ids' length)
  bool probe_membw = false;       // benchmarks: compute times a read of the resident weights per step
  double ready_timeout = 120;     // seconds to wait for every service's Ready
  double shutdown_timeout = 5;    // seconds between Shutdown and SIGTERM
  // State files (docs/formats.md "State file"): written after the run / continued by this run.
  std::string save_state, load_state;
  // Sampling and scoring (docs/sampling.md): default greedy; seed random unless given.
  ipc::compute::Sampling sampling;
  bool seed_given = false;
  int32_t logprobs = -1;          // -1 off; N: logprob + the N most likely ids per generated token
  bool perplexity = false;        // score the prompt teacher-forced
  // Chat (--chat, launcher/chat.h, docs/chat.md): a terminal REPL instead of one prompt.
  bool chat = false;
  std::string system;                   // --system: the conversation's system message
  int64_t reply_limit = 0;              // --reply-limit: most ids of one chat reply (0: its end id or the context)
  std::string thinking_effort = "max";  // --thinking-effort: low, high or max
  bool no_think = false;                // --no-think: no thinking channel
  bool thinking_effort_given = false;   // set by the TOML or the flag (refused with no_think)
  // The lines typed at a terminal's chat prompt, kept across sessions (launcher/input_history.h;
  // "" = the XDG state directory's file, "off" = none).
  std::string input_history;
  // --connect URL (launcher/remote.h, docs/chat.md "A running server"): --chat or --prompt
  // through a running k3-launch --serve's OpenAI API; no service is started.
  std::string connect;
  // Serve mode (--serve, docs/server.md): k3-server answers OpenAI-compatible HTTP requests.
  std::string serve;              // HOST:PORT ("" = not serving)
  std::string api_key;            // clients send "Authorization: Bearer KEY" ("" = none)
  std::string api_key_file;       // the key read from this file (common/secret_file.h) instead
  bool insecure = false;          // a non-loopback serve address without api_key
  std::vector<std::string> allowed_hosts;  // serve without a key: further Host names (request_gate.h)
  std::string served_model_name;  // the model id clients name (default: the model directory's name)
  int64_t queue_size = 16;        // requests waiting for a place in the batch; more: 429
  int64_t http_threads = 0;       // HTTP connection threads (0: max_batch + queue_size + 4)
  int64_t max_body_bytes = 1 << 20;  // largest request body; larger: 413
  int64_t max_tokens_default = 0;    // a request without max_tokens gets this (0: the limit, or the context)
  int64_t max_tokens_limit = 0;      // a request asking for more is 400 (0: no limit)
  double tokenizer_timeout = 30;     // seconds a prompt may wait for the tokenizer; then 504
  double compute_timeout = 900;      // seconds a liveness Ping may go unanswered (x4 the longest pass at least); then /health 503
  double queue_timeout = 3600;       // seconds a request may wait for a place in the batch; then 503 (0: none)
  double run_timeout = 0;            // seconds a request may run in compute; then it ends, finish "length" (0: none)
};

// The most expert servers a run uses (the fetcher's RemoteReads::kMaxServers).
inline constexpr size_t kMaxExpertServers = 64;

// The plan's PlanOptions::prefix_cache for these options: an explicit size as given; auto is
// plan::kPrefixCacheAuto when several requests reach one compute, else 0 (one prompt, or a chat
// that continues its kept sequence: nothing to reuse, so nothing is taken from the budget).
int64_t PrefixCacheFor(const LaunchOptions& opt, bool several_requests);

// Parses argv (CLI11) and the TOML it names, the flags given winning, then CheckOptions.
// Returns nullopt after --help or --version was printed.
std::optional<LaunchOptions> ParseLaunchOptions(int argc, char** argv);
// Overwrites the value of --api-key in argv with 'x's once it is parsed, so that other users
// reading /proc/PID/cmdline (ps) no longer see it.
void HideSecretArgs(int argc, char** argv);
// The same without CheckOptions (tests: what each flag sets).
std::optional<LaunchOptions> ReadLaunchOptions(int argc, char** argv);
// TOML text -> options (exposed for tests). `base_dir` resolves relative model paths.
// Checks each key's type; ranges are checked once, after the flags (CheckOptions).
void ApplyToml(const std::string& toml_text, const std::string& source_name,
               const std::string& base_dir, LaunchOptions& opt);
// Range checks of the merged options (TOML + flags); UsageError (exit 2) naming the option.
void CheckOptions(const LaunchOptions& opt);
// Every output FILE of the option table (kOutput) that is set must be writable as an
// AtomicFile (common/user_file.h: CheckOutputPath), else exit 4 before anything starts.
void CheckOutputFiles(LaunchOptions& opt);

}  // namespace k3::launch
