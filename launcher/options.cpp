#include "options.h"

#include <CLI/CLI.hpp>
#include <toml++/toml.h>

#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <stdexcept>
#include <type_traits>
#include <variant>
#include <sstream>

#include "common/error.h"
#include "common/ipc/curve.h"
#include "common/id_list.h"
#include "common/loopback.h"
#include "common/max_tokens_policy.h"
#include "common/secret_file.h"
#include "common/user_file.h"
#include "common/option_limits.h"
#include "common/plan/read_price.h"
#include "common/sampling_check.h"
#include "common/sampling_flags.h"
#include "common/plan/memory_plan.h"
#include "common/cli_parse.h"
#include "option_table.h"
#include "launcher/chat_settings.h"
#include "launcher/remote_api.h"

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

namespace {

// One TOML value into the option's field: its type checked, paths resolved.
void SetFromToml(const OptionSpec& spec, const toml::node& node, const std::string& source_name,
                 const std::string& base_dir, LaunchOptions& opt) {
  auto bad = [&](const char* want) { return UsageError(source_name + ": key '" + spec.key + "' must be " + want); };
  auto str = [&]() {
    if (!node.is_string()) throw bad("a string");
    return std::string(*node.value<std::string>());
  };
  auto integer = [&]() {
    if (!node.is_integer()) throw bad("an integer");
    return *node.value<int64_t>();
  };
  auto strings = [&](const char* want) {  // a string or a list of them
    std::vector<std::string> v;
    if (node.is_string()) return std::vector<std::string>{str()};
    const toml::array* arr = node.as_array();
    if (!arr) throw bad(want);
    for (const toml::node& e : *arr) {
      if (!e.is_string()) throw bad(want);
      v.push_back(std::string(*e.value<std::string>()));
    }
    return v;
  };
  const FieldRef field = spec.field(opt);
  switch (spec.type) {
    case OptionType::kString:
    case OptionType::kOutput: *std::get<std::string*>(field) = str(); break;
    case OptionType::kPath: *std::get<std::string*>(field) = ResolvePath(base_dir, str()); break;
    case OptionType::kSize:
      *std::get<std::string*>(field) = node.is_integer() ? std::to_string(integer()) : str();
      break;
    case OptionType::kInt: {
      const int64_t v = integer();
      if (int* const* small = std::get_if<int*>(&field)) {  // fields held in an int: no silent wrap-around
        if (v < INT_MIN || v > INT_MAX) throw bad("an integer in int range");
        **small = static_cast<int>(v);
      } else {
        *std::get<int64_t*>(field) = v;
      }
      break;
    }
    case OptionType::kNumber:
      if (!node.is_number()) throw bad("a number");
      if (float* const* f = std::get_if<float*>(&field)) **f = static_cast<float>(*node.value<double>());
      else *std::get<double*>(field) = *node.value<double>();
      break;
    case OptionType::kBool:
      if (!node.is_boolean()) throw bad("true or false");
      *std::get<bool*>(field) = *node.value<bool>();
      break;
    case OptionType::kStrings: *std::get<std::vector<std::string>*>(field) = strings("a string or a list of them"); break;
    case OptionType::kPaths: {
      std::vector<std::string> v = strings("a path or a list of them");
      for (std::string& p : v) p = ResolvePath(base_dir, p);
      *std::get<std::vector<std::string>*>(field) = v;
      break;
    }
    case OptionType::kTexts: {
      const toml::array* arr = node.as_array();
      if (!arr) throw bad("a list of strings");
      std::vector<std::string> v;
      for (const toml::node& e : *arr) {
        if (!e.is_string() || e.value<std::string>()->empty()) throw bad("a list of non-empty strings");
        v.push_back(*e.value<std::string>());
      }
      *std::get<std::vector<std::string>*>(field) = v;
      break;
    }
    case OptionType::kIds: {
      const toml::array* arr = node.as_array();
      if (!arr) throw bad("a list of token ids");
      std::vector<int32_t> v;
      for (const toml::node& e : *arr) {
        if (!e.is_integer() || *e.value<int64_t>() < 0 || *e.value<int64_t>() > INT32_MAX)
          throw bad("a list of non-negative token ids");
        v.push_back(static_cast<int32_t>(*e.value<int64_t>()));
      }
      *std::get<std::vector<int32_t>*>(field) = v;
      break;
    }
    case OptionType::kSeed: {
      const int64_t v = integer();
      if (v < 0) throw bad("a non-negative integer");
      *std::get<uint64_t*>(field) = static_cast<uint64_t>(v);
      break;
    }
  }
  if (spec.given) *spec.given(opt) = true;
}

// The flag of one option, bound to its field in `cli`; kIds bind their text to `ids_text`.
struct FlagTexts {
  std::map<std::string, std::string> list;                  // --stop-ids L,L
  std::map<std::string, std::vector<std::string>> singles;  // --stop-id N, repeated
};

void AddFlag(CLI::App& app, const OptionSpec& spec, LaunchOptions& cli, FlagTexts& texts) {
  const std::string flag = FlagOf(spec);
  const bool repeats = spec.type == OptionType::kStrings || spec.type == OptionType::kPaths ||
                       spec.type == OptionType::kTexts;
  const std::string help = spec.help + (repeats ? " (repeatable)" : "") + " (default: " + DefaultText(spec) + ")";
  const FieldRef field = spec.field(cli);
  CLI::Option* o = nullptr;
  switch (spec.type) {
    case OptionType::kBool: {
      const std::string negation = NegationOf(spec);
      o = app.add_flag(negation.empty() ? flag : flag + ",!" + negation, *std::get<bool*>(field), help);
      break;
    }
    case OptionType::kIds:
      o = app.add_option(flag, texts.list[spec.key], help);
      app.add_option(spec.one_flag, texts.singles[spec.key], "one id of " + flag + " (repeatable)")
          ->allow_extra_args(false)
          ->type_name("N");
      break;
    case OptionType::kSeed: o = app.add_option(flag, *std::get<uint64_t*>(field), help)->check(SeedValidator()); break;
    case OptionType::kStrings:
    case OptionType::kPaths:
    case OptionType::kTexts:
      o = app.add_option(flag, *std::get<std::vector<std::string>*>(field), help)
              ->allow_extra_args(false);
      break;
    default:
      o = std::visit(
          [&](auto* p) -> CLI::Option* {
            using V = std::remove_pointer_t<decltype(p)>;
            if constexpr (std::is_same_v<V, bool> || std::is_same_v<V, std::vector<int32_t>> ||
                          std::is_same_v<V, std::vector<std::string>>)
              throw std::logic_error("option table: " + spec.key + " has a field of another type");
            else
              return app.add_option(flag, *p, help);
          },
          field);
  }
  if (!spec.value.empty()) o->type_name(spec.value);
}

}  // namespace

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
    const OptionSpec* spec = FindLaunchOption(key.str());
    if (!spec) throw UsageError(source_name + ": unknown key '" + std::string(key.str()) + "'");
    SetFromToml(*spec, node, source_name, base_dir, opt);
  }
}

std::optional<LaunchOptions> ReadLaunchOptions(int argc, char** argv) {
  LaunchOptions cli;
  FlagTexts texts;
  CLI::App app{"k3-launch: run Kimi K3 as a pipeline of services within a memory budget. Every flag --a-b is "
               "the TOML key a_b (docs/formats.md); a flag given wins over the TOML."};
  app.add_option("config", cli.config_path, "TOML configuration (configs/*.toml); required unless --connect");
  std::map<std::string, std::vector<CLI::Option*>> groups;
  for (const OptionSpec& spec : LaunchOptionTable()) {
    AddFlag(app, spec, cli, texts);
    if (!spec.group.empty()) groups[spec.group].push_back(app.get_option(FlagOf(spec)));
  }
  for (auto& [name, members] : groups)  // one flag of an exclusive group at most
    for (size_t i = 0; i < members.size(); ++i)
      for (size_t j = i + 1; j < members.size(); ++j) members[i]->excludes(members[j]);
  if (!ParseCommandLine(app, argc, argv, "k3-launch")) return std::nullopt;  // --help, --version

  LaunchOptions opt;
  // --connect needs no TOML: the server has the model and the budget.
  if (cli.config_path.empty() && (app.get_option("--connect")->count() == 0))
    throw UsageError("config is required (a TOML such as configs/demo.toml), except with --connect");
  if (!cli.config_path.empty()) {
    const std::string text = ReadUserFile(cli.config_path, kMaxConfigFileBytes, "config", kExitUsage);
    const std::string base = std::filesystem::path(cli.config_path).parent_path().string();
    ApplyToml(text, cli.config_path, base, opt);
  }
  opt.config_path = cli.config_path;
  // Flags given on the command line win over the TOML.
  auto given = [&](const std::string& flag) { return app.get_option(flag)->count() > 0; };
  for (const OptionSpec& spec : LaunchOptionTable()) {
    if (spec.type == OptionType::kIds) {
      if (given(FlagOf(spec)) || given(spec.one_flag))
        *std::get<std::vector<int32_t>*>(spec.field(opt)) =
            limits::ParseStopIds(texts.list[spec.key], texts.singles[spec.key]);
      continue;
    }
    if (!given(FlagOf(spec))) continue;
    for (const OptionSpec& to : LaunchOptionTable()) {  // the option, or every key of its group
      if (&to != &spec && (spec.group.empty() || to.group != spec.group)) continue;
      std::visit([&](auto* dst) { *dst = *std::get<decltype(dst)>(to.field(cli)); }, to.field(opt));
      if (to.given) *to.given(opt) = true;
    }
  }
  if (!opt.seed_given) opt.sampling.seed = RandomSeed();
  return opt;
}

void HideSecretArgs(int argc, char** argv) {
  static constexpr std::string_view kFlag = "--api-key";
  for (int i = 1; i < argc; ++i) {
    const std::string_view a(argv[i]);
    char* secret = nullptr;
    if (a == kFlag && i + 1 < argc) secret = argv[i + 1];
    else if (a.size() > kFlag.size() && a.substr(0, kFlag.size()) == kFlag && a[kFlag.size()] == '=')
      secret = argv[i] + kFlag.size() + 1;
    if (secret) std::memset(secret, 'x', std::strlen(secret));
  }
}

std::optional<LaunchOptions> ParseLaunchOptions(int argc, char** argv) {
  std::optional<LaunchOptions> opt = ReadLaunchOptions(argc, argv);
  HideSecretArgs(argc, argv);
  if (opt && !opt->api_key_file.empty()) {
    if (opt->serve.empty() && opt->connect.empty()) throw UsageError("--api-key-file needs --serve or --connect");
    if (!opt->api_key.empty()) throw UsageError("api_key and api_key_file exclude each other: give one");
    opt->api_key = ReadSecretFile(opt->api_key_file, "api_key_file");  // exit 7 naming it
  }
  // The key may come from the environment, which other users cannot read (argv they can).
  if (opt && opt->api_key.empty() && (!opt->serve.empty() || !opt->connect.empty()))
    if (const char* k = std::getenv("K3_API_KEY"); k && *k) opt->api_key = k;
  if (opt) CheckOptions(*opt);
  return opt;
}

void CheckOutputFiles(LaunchOptions& opt) {
  for (const OptionSpec& spec : LaunchOptionTable()) {
    if (spec.type != OptionType::kOutput || spec.value != "FILE") continue;  // a DIR holds several files
    const std::string& path = *std::get<std::string*>(spec.field(opt));
    if (!path.empty()) CheckOutputPath(path, FlagOf(spec));
  }
}

// --connect: the chat or the prompt goes to a running server; what only a local run does is refused.
static void CheckConnectOptions(const LaunchOptions& opt) {
  if (const std::string bad = ServerUrlProblem(opt.connect); !bad.empty()) throw UsageError("--connect " + bad);
  if (!opt.serve.empty()) throw UsageError("--connect and --serve exclude each other");
  if (!opt.chat && opt.prompt.empty() && opt.prompt_file.empty() && opt.ids.empty())
    throw UsageError("--connect needs --chat, --prompt, --prompt-file or --ids");
  if (opt.dry_run || !opt.save_state.empty() || !opt.load_state.empty() || opt.perplexity || !opt.dump_logits.empty())
    throw UsageError("--connect has no --dry-run, --save-state, --load-state, --perplexity or --dump-logits (the server runs the model)");
  if (opt.insecure || !opt.allowed_hosts.empty() || !opt.served_model_name.empty())
    throw UsageError("--insecure, --allowed-hosts and --served-model-name are the server's (--serve), not --connect's");
}

void CheckOptions(const LaunchOptions& opt) {
  if (!opt.connect.empty()) CheckConnectOptions(opt);
  if (opt.budget.empty() && opt.connect.empty()) throw UsageError("--budget is required (in the TOML or on the command line)");
  if (opt.model.empty() && opt.connect.empty()) throw UsageError("no model: set 'model' in the TOML or pass --model");
  if (opt.gen < 0) throw UsageError("--gen must be >= 0");
  if (opt.reply_limit < 0) throw UsageError("--reply-limit must be >= 0");
  if (const std::string bad = limits::ThreadsProblem(opt.threads, true); !bad.empty()) throw UsageError(bad);
  if (opt.context < 1) throw UsageError("--context must be >= 1");
  for (const std::string& s : opt.stop)
    if (s.empty()) throw UsageError("--stop: the text must not be empty");
  if (opt.prompt_tokens < 0) throw UsageError("--prompt-tokens must be >= 0");
  if (opt.json && !opt.dry_run) throw UsageError("--json needs --dry-run (a run's report is --out)");
  if (!opt.disk_rate.empty() && opt.disk_rate != "probe") (void)plan::ParseDiskRate(opt.disk_rate);  // exit 2 naming it
  if (opt.prefill_chunk < 0) throw UsageError("prefill_chunk must be >= 0 (0: no cap; the plan chooses, up to the context)");
  if (opt.spec < 0 || opt.spec > plan::kMaxSpecDrafts)
    throw UsageError("--spec " + std::to_string(opt.spec) + ": must be 0 to " + std::to_string(plan::kMaxSpecDrafts));
  if (opt.max_batch < 1 || opt.max_batch > plan::kMaxBatch)
    throw UsageError("--max-batch " + std::to_string(opt.max_batch) + ": must be 1 to " + std::to_string(plan::kMaxBatch));
  if (opt.spec > 0 && opt.full_recompute) throw UsageError("--spec needs incremental decoding, not full_recompute");
  (void)plan::ParsePrefixCache(opt.prefix_cache, "prefix_cache", true);  // exit 2 naming it
  if (plan::ParsePrefixCache(opt.prefix_store_size, "prefix_store_size", false) <= 0)
    throw UsageError("prefix_store_size: a size above 0 (e.g. 16G)");
  if (opt.prefix_store_interval < 0) throw UsageError("prefix_store_interval must be >= 0");
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
  if (!(opt.ready_timeout >= 0.1 && opt.ready_timeout <= 86400))
    throw UsageError("ready_timeout must be between 0.1 and 86400 seconds");
  if (!(opt.shutdown_timeout >= 0 && opt.shutdown_timeout <= 3600))
    throw UsageError("shutdown_timeout must be between 0 and 3600 seconds");
  if (opt.io != "direct" && opt.io != "pread" && opt.io != "uring" && opt.io != "mmap")
    throw UsageError("--io: unknown backend '" + opt.io + "' (direct, pread, uring, mmap)");
  if (const std::string bad = SamplingProblem(opt.sampling, opt.logprobs); !bad.empty()) throw UsageError(bad);
  if (!IsThinkingEffort(opt.thinking_effort))
    throw UsageError("--thinking-effort: '" + opt.thinking_effort + "' is not low, high or max");
  if (opt.no_think && opt.thinking_effort_given)
    throw UsageError("--no-think and --thinking-effort contradict each other");
  if (!opt.chat && !opt.system.empty()) throw UsageError("--system needs --chat");
  if (!opt.chat && opt.serve.empty() && (opt.no_think || opt.thinking_effort_given))
    throw UsageError("--thinking-effort and --no-think need --chat or --serve");
  if (!opt.chat && !opt.input_history.empty()) throw UsageError("--input-history needs --chat");
  if (!opt.api_key_file.empty() && opt.serve.empty() && opt.connect.empty())
    throw UsageError("--api-key-file needs --serve or --connect");
  if (opt.chat && (!opt.prompt.empty() || !opt.prompt_file.empty() || !opt.ids.empty()))
    throw UsageError("--chat takes its prompts from the terminal: no --prompt, --prompt-file or --ids");
  if (!opt.connect.empty()) return;
  if (opt.serve.empty()) {
    if (!opt.api_key.empty() || opt.insecure || !opt.served_model_name.empty() || !opt.allowed_hosts.empty())
      throw UsageError("--api-key, --insecure, --served-model-name and --allowed-hosts need --serve");
    return;
  }
  if (opt.chat || !opt.prompt.empty() || !opt.prompt_file.empty() || !opt.ids.empty())
    throw UsageError("--serve takes its prompts over HTTP: no --chat, --prompt, --prompt-file or --ids");
  if (!opt.save_state.empty() || !opt.load_state.empty() || opt.perplexity || opt.logprobs >= 0)
    throw UsageError("--serve has no --save-state, --load-state, --perplexity or --logprobs (requests ask for logprobs)");
  const size_t colon = opt.serve.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == opt.serve.size() ||
      opt.serve.find_first_not_of("0123456789", colon + 1) != std::string::npos || opt.serve.size() - colon > 6 ||
      std::stol(opt.serve.substr(colon + 1)) > 65535)
    throw UsageError("--serve '" + opt.serve + "': want HOST:PORT (port 0 to 65535)");
  if (!opt.api_key.empty() && opt.insecure) throw UsageError("--insecure and --api-key exclude each other");
  for (const std::string& h : opt.allowed_hosts)
    if (h.empty() || h.find_first_of(", \t") != std::string::npos)
      throw UsageError("--allowed-hosts '" + h + "': one host name, no commas or spaces");
  if (opt.api_key.empty() && !opt.insecure && !IsLoopbackHost(opt.serve.substr(0, colon)))
    throw UsageError("--serve " + opt.serve + " is reachable from other machines: pass --api-key, or --insecure");
  if (opt.queue_size < 0 || opt.queue_size > (1 << 20)) throw UsageError("queue_size must be 0 to 1048576");
  if (opt.http_threads < 0 || opt.http_threads > 4096) throw UsageError("http_threads must be 0 (automatic) to 4096");
  if (opt.max_body_bytes < 1024) throw UsageError("max_body_bytes must be at least 1024");
  if (const std::string bad = MaxTokensPolicyProblem({opt.max_tokens_default, opt.max_tokens_limit}); !bad.empty())
    throw UsageError(bad);
  if (!(opt.tokenizer_timeout >= 0.1 && opt.tokenizer_timeout <= 86400))
    throw UsageError("tokenizer_timeout must be 0.1 to 86400 seconds");
  if (!(opt.compute_timeout >= 0.1 && opt.compute_timeout <= 86400))
    throw UsageError("compute_timeout must be 0.1 to 86400 seconds");
  if (!(opt.queue_timeout >= 0 && opt.queue_timeout <= 604800)) throw UsageError("queue_timeout must be 0 to 604800 seconds");
  if (!(opt.run_timeout >= 0 && opt.run_timeout <= 604800)) throw UsageError("run_timeout must be 0 to 604800 seconds");
}

}  // namespace k3::launch
