// k3-launch options: the TOML reader (ApplyToml), flags over the TOML, and the range checks.
#include "launcher/options.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "common/error.h"
#include "common/option_limits.h"
#include "common/plan/memory_plan.h"

namespace k3::launch {
namespace {

// The exit code and message of `f`, or 0 when it does not throw.
template <class F>
std::pair<int, std::string> Outcome(F f) {
  try {
    f();
    return {0, ""};
  } catch (const Error& e) {
    return {e.code(), e.what()};
  }
}

std::pair<int, std::string> Toml(const std::string& text, LaunchOptions& o) {
  return Outcome([&] { ApplyToml(text, "test.toml", "/etc/k3", o); });
}

TEST(Toml, EveryKeyWithItsType) {
  LaunchOptions o;
  ASSERT_EQ(Toml("model = \"m\"\ntokenizer = \"/abs/tok\"\nbudget = \"8G\"\nio = \"direct\"\nprompt = \"Hi\"\n"
                 "prompt_file = \"p.txt\"\nids = \"1,2\"\ngen = 7\ncontext = 2048\nprefill_chunk = 32\n"
                 "ring_slots = 3\nthreads = 2\nexpert_inputs = \"bf16\"\nexpert_server = \"tcp://h:1\"\n"
                 "inflight = 5\nmax_pinned_trunk = 100\nfull_recompute = true\nexpert_server_timeout = 2\n"
                 "prefetch_hints = false\nout = \"r.json\"\nquiet = true\nstop_ids = [3, 0, 99]\nexpert_slots = 9\n"
                 "trunk_piece = \"32M\"\nread_ahead = 268435456\nmax_batch = 4\n",
                 o).first,
            0);
  EXPECT_EQ(o.model, "/etc/k3/m");              // relative: to the TOML's directory
  EXPECT_EQ(o.tokenizer, "/abs/tok");           // absolute: kept
  EXPECT_EQ(o.prompt_file, "/etc/k3/p.txt");
  EXPECT_EQ(o.out, "r.json");                   // outputs: relative to the working directory
  EXPECT_EQ(o.budget, "8G");
  EXPECT_EQ(o.io, "direct");
  EXPECT_EQ(o.gen, 7);
  EXPECT_EQ(o.context, 2048);
  EXPECT_EQ(o.prefill_chunk, 32);
  EXPECT_EQ(o.ring_slots, 3);
  EXPECT_EQ(o.threads, 2);
  EXPECT_EQ(o.inflight, 5);
  EXPECT_EQ(o.max_pinned_trunk, 100);
  EXPECT_TRUE(o.full_recompute);
  EXPECT_DOUBLE_EQ(o.expert_server_timeout, 2.0);
  EXPECT_FALSE(o.prefetch_hints);
  EXPECT_TRUE(o.quiet);
  EXPECT_EQ(o.stop_ids, (std::vector<int32_t>{3, 0, 99}));
  EXPECT_EQ(o.expert_server, (std::vector<std::string>{"tcp://h:1"}));
  EXPECT_EQ(o.expert_slots, 9);
  EXPECT_EQ(o.trunk_piece, "32M");
  EXPECT_EQ(o.read_ahead, "268435456");
  EXPECT_EQ(o.max_batch, 4);
  LaunchOptions q;  // several expert servers: a list
  ASSERT_EQ(Toml("expert_server = [\"tcp://a:1\", \"tcp://b:2\"]\n", q).first, 0);
  EXPECT_EQ(q.expert_server, (std::vector<std::string>{"tcp://a:1", "tcp://b:2"}));
  LaunchOptions p;
  ASSERT_EQ(Toml("model = \"../models/x\"\nbudget = 1073741824\n", p).first, 0);
  EXPECT_EQ(p.model, "/etc/models/x");
  EXPECT_EQ(p.budget, "1073741824");  // an integer budget is bytes
}

TEST(Toml, UnknownKeysAndWrongTypesNameTheKey) {
  struct Case {
    const char* text;
    const char* key;
  } cases[] = {
      {"modle = \"x\"\n", "modle"},
      {"gen = \"16\"\n", "gen"},
      {"gen = 1.5\n", "gen"},
      {"model = 3\n", "model"},
      {"full_recompute = 1\n", "full_recompute"},
      {"expert_server_timeout = \"60\"\n", "expert_server_timeout"},
      {"threads = 5000000000\n", "threads"},  // would wrap around in an int
      {"stop_ids = \"1,2\"\n", "stop_ids"},
      {"stop_ids = [1, \"2\"]\n", "stop_ids"},
      {"stop_ids = [-1]\n", "stop_ids"},
      {"quiet = \"yes\"\n", "quiet"},
      {"expert_server = 5\n", "expert_server"},
      {"expert_server = [\"tcp://a:1\", 2]\n", "expert_server"},
      {"expert_slots = \"8\"\n", "expert_slots"},
      {"[model]\npath = \"x\"\n", "model"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.text);
    LaunchOptions o;
    const auto [code, msg] = Toml(c.text, o);
    EXPECT_EQ(code, kExitUsage);
    EXPECT_NE(msg.find(std::string("'") + c.key + "'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("test.toml"), std::string::npos) << msg;
  }
}

TEST(Toml, StateFileKeys) {
  LaunchOptions o;
  ASSERT_EQ(Toml("load_state = \"s/a.k3state\"\nsave_state = \"b.k3state\"\n", o).first, 0);
  EXPECT_EQ(o.load_state, "/etc/k3/s/a.k3state");  // an input: relative to the TOML's directory
  EXPECT_EQ(o.save_state, "b.k3state");            // an output: relative to the working directory
  for (const char* text : {"load_state = 1\n", "save_state = true\n"}) {
    LaunchOptions p;
    EXPECT_EQ(Toml(text, p).first, kExitUsage) << text;
  }
}

// The expert manifest's keys (docs/formats.md "Expert manifest"): a path relative to the
// TOML's directory, and a boolean.
TEST(Toml, ManifestAndNoVerify) {
  LaunchOptions o;
  EXPECT_TRUE(o.manifest.empty());
  EXPECT_FALSE(o.no_verify);
  ASSERT_EQ(Toml("manifest = \"m/k3-manifest.json\"\nno_verify = true\n", o).first, 0);
  EXPECT_EQ(o.manifest, "/etc/k3/m/k3-manifest.json");
  EXPECT_TRUE(o.no_verify);
  for (const char* bad : {"no_verify = 1\n", "no_verify = \"yes\"\n", "manifest = 3\n"}) {
    LaunchOptions p;
    const auto [code, msg] = Toml(bad, p);
    EXPECT_EQ(code, kExitUsage) << bad;
    EXPECT_NE(msg.find(std::string(bad).substr(0, std::string(bad).find(' '))), std::string::npos) << msg;
  }
}

// prefix_cache (docs/formats.md): a size string or bytes, 0/off, or auto (the default); auto is
// off for a one-request run and the plan's auto when several requests reach compute.
TEST(Toml, PrefixCache) {
  LaunchOptions o;
  EXPECT_EQ(o.prefix_cache, "auto");
  EXPECT_EQ(PrefixCacheFor(o, false), 0);
  EXPECT_EQ(PrefixCacheFor(o, true), plan::kPrefixCacheAuto);
  ASSERT_EQ(Toml("prefix_cache = \"512M\"\n", o).first, 0);
  EXPECT_EQ(PrefixCacheFor(o, false), int64_t{512} << 20);
  EXPECT_EQ(PrefixCacheFor(o, true), int64_t{512} << 20);
  ASSERT_EQ(Toml("prefix_cache = 65536\n", o).first, 0);
  EXPECT_EQ(PrefixCacheFor(o, false), 65536);
  ASSERT_EQ(Toml("prefix_cache = \"off\"\n", o).first, 0);
  EXPECT_EQ(PrefixCacheFor(o, true), 0);
  EXPECT_EQ(Toml("prefix_cache = true\n", o).first, kExitUsage);
  LaunchOptions bad;
  bad.budget = "1G";
  bad.model = "/m";
  EXPECT_EQ(Outcome([&] { CheckOptions(bad); }).first, 0);
  ASSERT_EQ(Toml("prefix_cache = \"12Q\"\n", bad).first, 0);  // the value is checked with the flags
  const auto [code, msg] = Outcome([&] { CheckOptions(bad); });
  EXPECT_EQ(code, kExitUsage);
  EXPECT_NE(msg.find("prefix_cache"), std::string::npos) << msg;
}

TEST(Toml, SyntaxErrorNamesTheLine) {
  LaunchOptions o;
  const auto [code, msg] = Toml("gen = 4\nmodel = \"unterminated\n", o);
  EXPECT_EQ(code, kExitUsage);
  EXPECT_NE(msg.find("test.toml:2"), std::string::npos) << msg;
}

class FlagsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("k3-options-test-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
    toml_ = (dir_ / "c.toml").string();
    std::ofstream(toml_) << "model = \"mdl\"\nbudget = \"2G\"\ngen = 5\ncontext = 1024\nthreads = 1\n"
                            "stop_ids = [4]\nids = \"1,2\"\n";
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::pair<int, std::string> Parse(std::vector<std::string> args, LaunchOptions& out) {
    args.insert(args.begin(), {"k3-launch", toml_});
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    return Outcome([&] { out = *ParseLaunchOptions(static_cast<int>(argv.size()), argv.data()); });
  }
  std::filesystem::path dir_;
  std::string toml_;
};

TEST_F(FlagsTest, FlagsOverrideTheToml) {
  LaunchOptions o;
  ASSERT_EQ(Parse({}, o).first, 0);
  EXPECT_EQ(o.model, (dir_ / "mdl").string());
  EXPECT_EQ(o.gen, 5);
  EXPECT_EQ(o.stop_ids, std::vector<int32_t>{4});
  EXPECT_FALSE(o.quiet);
  ASSERT_EQ(Parse({"--gen", "9", "--context", "512", "--budget", "3G", "--model", "/m", "--stop-ids", "7,8",
                   "--quiet", "--prompt", "Hello", "--threads", "0"},
                  o).first,
            0);
  EXPECT_EQ(o.gen, 9);
  EXPECT_EQ(o.context, 512);
  EXPECT_EQ(o.budget, "3G");
  EXPECT_EQ(o.model, "/m");  // a --model flag is taken as given
  EXPECT_EQ(o.stop_ids, (std::vector<int32_t>{7, 8}));
  EXPECT_TRUE(o.quiet);
  EXPECT_EQ(o.prompt, "Hello");
  EXPECT_EQ(o.ids, "");  // one prompt source replaces the other
  EXPECT_EQ(o.threads, 0);
}

// --connect (docs/chat.md "A running server"): the key's sources and the rules of the mode.
TEST_F(FlagsTest, ConnectKeysAndRules) {
  std::ofstream(toml_) << "model = \"mdl\"\nbudget = \"2G\"\n";  // no prompt: --chat may come
  LaunchOptions o;
  ::setenv("K3_API_KEY", "from-env", 1);
  ASSERT_EQ(Parse({"--prompt", "x"}, o).first, 0);  // a local run: the variable is not its key
  EXPECT_EQ(o.api_key, "");
  ASSERT_EQ(Parse({"--prompt", "x", "--connect", "http://127.0.0.1:8080"}, o).first, 0);
  EXPECT_EQ(o.api_key, "from-env");
  const std::string key_file = (dir_ / "key").string();
  std::ofstream(key_file) << "from-file\n";
  std::filesystem::permissions(key_file, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  ASSERT_EQ(Parse({"--chat", "--connect", "http://h:1", "--api-key-file", key_file}, o).first, 0);
  EXPECT_EQ(o.api_key, "from-file");  // the file before the variable
  ::unsetenv("K3_API_KEY");
  EXPECT_EQ(Parse({"--chat", "--connect", "http://h:1", "--api-key-file", key_file, "--api-key", "k"}, o).first,
            kExitUsage);
  std::ofstream(key_file) << "two words\n";
  EXPECT_EQ(Parse({"--chat", "--connect", "http://h:1", "--api-key-file", key_file}, o).first, kExitBadInput);
  EXPECT_EQ(Parse({"--chat", "--connect", "http://h:1", "--api-key-file", dir_.string()}, o).first, kExitBadInput);
  EXPECT_EQ(Parse({"--prompt", "x", "--api-key-file", key_file}, o).first, kExitUsage);  // neither serve nor connect
  EXPECT_EQ(Parse({"--connect", "http://h:1"}, o).first, kExitUsage);  // nothing to send
  EXPECT_EQ(Parse({"--chat", "--connect", "https://h:1"}, o).first, kExitUsage);
  EXPECT_EQ(Parse({"--chat", "--connect", "http://h:1", "--serve", "127.0.0.1:0"}, o).first, kExitUsage);
  EXPECT_EQ(Parse({"--chat", "--connect", "http://h:1", "--save-state", "s"}, o).first, kExitUsage);
  EXPECT_EQ(Parse({"--prompt", "x", "--input-history", "h"}, o).first, kExitUsage);  // a chat's
  ASSERT_EQ(Parse({"--chat", "--input-history", "off"}, o).first, 0);
  EXPECT_EQ(o.input_history, "off");
}

TEST_F(FlagsTest, StopFlagsRepeatAndAddUp) {
  LaunchOptions o;
  ASSERT_EQ(Parse({"--stop-id", "9", "--stop-ids", "7,8", "--stop-id", "3", "--stop", "a b", "--stop", "\n\n",
                   "--ignore-eos"},
                  o).first,
            0);
  EXPECT_EQ(o.stop_ids, (std::vector<int32_t>{7, 8, 9, 3}));  // the flags replace the TOML's [4]
  EXPECT_EQ(o.stop, (std::vector<std::string>{"a b", "\n\n"}));
  EXPECT_TRUE(o.ignore_eos);
  ASSERT_EQ(Parse({"--stop-id", "5"}, o).first, 0);
  EXPECT_EQ(o.stop_ids, std::vector<int32_t>{5});
  EXPECT_FALSE(o.ignore_eos);
  EXPECT_EQ(Parse({"--stop-id", "1,2"}, o).first, kExitUsage);
  EXPECT_EQ(Parse({"--stop-id", "-1"}, o).first, kExitUsage);
  EXPECT_EQ(Parse({"--stop", ""}, o).first, kExitUsage);
}

TEST(Toml, StopAndIgnoreEos) {
  LaunchOptions o;
  ASSERT_EQ(Toml("stop = [\"END\", \"\\n\\n\"]\nignore_eos = true\n", o).first, 0);
  EXPECT_EQ(o.stop, (std::vector<std::string>{"END", "\n\n"}));
  EXPECT_TRUE(o.ignore_eos);
  for (const char* bad : {"stop = \"END\"\n", "stop = [1]\n", "stop = [\"\"]\n", "ignore_eos = 1\n"}) {
    LaunchOptions p;
    const auto [code, msg] = Toml(bad, p);
    EXPECT_EQ(code, kExitUsage) << bad;
    EXPECT_NE(msg.find(std::string(bad).substr(0, 4)), std::string::npos) << msg;
  }
}

TEST_F(FlagsTest, RangeChecks) {
  LaunchOptions o;
  for (const std::vector<std::string>& bad :
       std::vector<std::vector<std::string>>{{"--threads", "-1"},
                                             {"--threads", std::to_string(limits::MaxThreads() + 1)},
                                             {"--threads", "100000"},
                                             {"--context", "0"},
                                             {"--gen", "-2"},
                                             {"--stop-ids", "1,,2"},
                                             {"--stop-ids", "x"},
                                             {"--inflight", "0"},
                                             {"--io", "floppy"},
                                             {"--expert-slots", "0"},
                                             {"--max-batch", "0"},
                                             {"--max-batch", "65"},
                                             {"--expert-server", "localhost:1"},
                                             {"--expert-server", "tcp://a:1", "--expert-server", "tcp://a:1"},
                                             {"--unknown-flag"}}) {
    SCOPED_TRACE(bad[0] + (bad.size() > 1 ? " " + bad[1] : ""));
    EXPECT_EQ(Parse(bad, o).first, kExitUsage);
  }
  const auto [code, msg] = Parse({"--threads", "100000"}, o);
  EXPECT_NE(msg.find("online CPU cores"), std::string::npos) << msg;
  EXPECT_NE(msg.find(std::to_string(limits::MaxThreads() / 4)), std::string::npos) << msg;
  EXPECT_EQ(Parse({"--threads", std::to_string(limits::MaxThreads())}, o).first, 0);
  ASSERT_EQ(Parse({"--max-batch", "8"}, o).first, 0);
  EXPECT_EQ(o.max_batch, 8);
}

}  // namespace
}  // namespace k3::launch

namespace k3::launch {
namespace {

LaunchOptions Serving(const std::string& toml) {
  LaunchOptions o;
  o.budget = "1G";
  o.model = "/m";
  ApplyToml(toml, "t.toml", "/", o);
  return o;
}

// --serve (docs/server.md): its TOML keys, and the loopback rule of k3-expert-server.
TEST(ServeOptions, TomlKeysAndRules) {
  const LaunchOptions o = Serving("serve = \"127.0.0.1:8080\"\nserved_model_name = \"k3\"\nmax_batch = 4\n"
                                  "queue_size = 3\nhttp_threads = 9\nmax_body_bytes = 4096\n");
  EXPECT_EQ(o.serve, "127.0.0.1:8080");
  EXPECT_EQ(o.served_model_name, "k3");
  EXPECT_EQ(o.max_batch, 4);
  EXPECT_EQ(o.queue_size, 3);
  EXPECT_EQ(o.http_threads, 9);
  EXPECT_EQ(o.max_body_bytes, 4096);
  EXPECT_EQ(Outcome([&] { CheckOptions(o); }).first, 0);
  auto check = [](const std::string& toml) { return Outcome([&] { CheckOptions(Serving(toml)); }); };
  // Other machines can reach 0.0.0.0: a key, or --insecure.
  const auto open = check("serve = \"0.0.0.0:8080\"\n");
  EXPECT_EQ(open.first, kExitUsage);
  EXPECT_NE(open.second.find("--api-key"), std::string::npos);
  EXPECT_EQ(check("serve = \"0.0.0.0:8080\"\napi_key = \"k\"\n").first, 0);
  EXPECT_EQ(check("serve = \"0.0.0.0:8080\"\ninsecure = true\n").first, 0);
  EXPECT_EQ(check("serve = \"[::1]:8080\"\n").first, 0);
  EXPECT_EQ(check("serve = \"localhost:1\"\n").first, 0);
  // A name spelled like a loopback address is judged by what it resolves to (nothing here).
  EXPECT_EQ(check("serve = \"127.0.0.1.attacker.example:8080\"\n").first, kExitUsage);
  EXPECT_EQ(check("serve = \"127.0.0.1:8080\"\napi_key = \"k\"\ninsecure = true\n").first, kExitUsage);
  for (const char* bad : {"8080", "127.0.0.1:", "127.0.0.1:99999", "127.0.0.1:8x", ":80"})
    EXPECT_EQ(check(std::string("serve = \"") + bad + "\"\n").first, kExitUsage) << bad;
  EXPECT_EQ(check("serve = \"127.0.0.1:1\"\nmax_batch = 0\n").first, kExitUsage);
  EXPECT_EQ(check("serve = \"127.0.0.1:1\"\nqueue_size = -1\n").first, kExitUsage);
  EXPECT_EQ(check("serve = \"127.0.0.1:1\"\nmax_body_bytes = 10\n").first, kExitUsage);
  // tokenizer_timeout: 0.1 s to a day (docs/server.md "Options").
  EXPECT_EQ(Serving("serve = \"127.0.0.1:1\"\ntokenizer_timeout = 2.5\n").tokenizer_timeout, 2.5);
  EXPECT_EQ(check("serve = \"127.0.0.1:1\"\ntokenizer_timeout = 0.1\n").first, 0);
  EXPECT_EQ(check("serve = \"127.0.0.1:1\"\ntokenizer_timeout = 0\n").first, kExitUsage);
  EXPECT_EQ(check("serve = \"127.0.0.1:1\"\ntokenizer_timeout = 86401\n").first, kExitUsage);
  // The request deadlines (docs/server.md "Limits"): 0 is none for the queue and the run, not
  // for the liveness ping.
  EXPECT_EQ(Serving("serve = \"127.0.0.1:1\"\ncompute_timeout = 5\nqueue_timeout = 0\nrun_timeout = 60\n").run_timeout, 60);
  EXPECT_EQ(Serving("serve = \"127.0.0.1:1\"\n").queue_timeout, 3600);
  EXPECT_EQ(check("serve = \"127.0.0.1:1\"\ncompute_timeout = 0\n").first, kExitUsage);
  EXPECT_EQ(check("serve = \"127.0.0.1:1\"\nqueue_timeout = -1\n").first, kExitUsage);
  EXPECT_EQ(check("serve = \"127.0.0.1:1\"\nrun_timeout = 604801\n").first, kExitUsage);
  EXPECT_EQ(check("serve = \"127.0.0.1:1\"\nprompt = \"hi\"\n").first, kExitUsage);  // prompts come over HTTP
  EXPECT_EQ(check("serve = \"127.0.0.1:1\"\nchat = true\n").first, kExitUsage);
  EXPECT_EQ(check("api_key = \"k\"\nprompt = \"hi\"\n").first, kExitUsage);  // needs --serve
  EXPECT_EQ(check("serve = \"127.0.0.1:1\"\nno_think = true\n").first, 0);  // chat defaults of the server
  EXPECT_EQ(check("serve = 8080\n").first, kExitUsage);
}

TEST(ServeOptions, MaxTokensDefaultAndLimit) {
  const LaunchOptions o = Serving("serve = \"127.0.0.1:1\"\nmax_tokens_default = 256\nmax_tokens_limit = 4096\n");
  EXPECT_EQ(o.max_tokens_default, 256);
  EXPECT_EQ(o.max_tokens_limit, 4096);
  EXPECT_EQ(Outcome([&] { CheckOptions(o); }).first, 0);
  auto check = [](const std::string& toml) { return Outcome([&] { CheckOptions(Serving(toml)); }); };
  const auto above = check("serve = \"127.0.0.1:1\"\nmax_tokens_default = 5000\nmax_tokens_limit = 4096\n");
  EXPECT_EQ(above.first, kExitUsage);
  EXPECT_NE(above.second.find("max_tokens_default 5000 is above max_tokens_limit 4096"), std::string::npos);
  EXPECT_EQ(check("serve = \"127.0.0.1:1\"\nmax_tokens_limit = -1\n").first, kExitUsage);
  EXPECT_EQ(check("serve = \"127.0.0.1:1\"\nmax_tokens_default = 5000\n").first, 0);  // no limit
}

// api_key_file: the key read from an owner-only file, never with api_key; K3_API_KEY only
// when neither is given.
TEST(ServeOptions, ApiKeyFile) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("k3-api-key-file-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string toml = (dir / "c.toml").string(), key = (dir / "key").string();
  std::ofstream(toml) << "model = \"mdl\"\nbudget = \"2G\"\nserve = \"127.0.0.1:1\"\n";
  std::ofstream(key) << "sk-from-file\n";
  std::filesystem::permissions(key, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  auto parse = [&](std::vector<std::string> args, LaunchOptions& out) {
    args.insert(args.begin(), {"k3-launch", toml});
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    return Outcome([&] { out = *ParseLaunchOptions(static_cast<int>(argv.size()), argv.data()); });
  };
  ::setenv("K3_API_KEY", "sk-from-env", 1);
  LaunchOptions o;
  ASSERT_EQ(parse({"--api-key-file", key}, o).first, 0);
  EXPECT_EQ(o.api_key, "sk-from-file");  // the file, not the environment
  ASSERT_EQ(parse({}, o).first, 0);
  EXPECT_EQ(o.api_key, "sk-from-env");
  ::unsetenv("K3_API_KEY");
  EXPECT_EQ(parse({"--api-key-file", key, "--api-key", "k"}, o).first, kExitUsage);
  std::filesystem::permissions(key, std::filesystem::perms::group_read, std::filesystem::perm_options::add);
  const auto open = parse({"--api-key-file", key}, o);
  EXPECT_EQ(open.first, kExitBadInput);
  EXPECT_NE(open.second.find("api_key_file " + key + ": other users can access it (mode 0640)"), std::string::npos)
      << open.second;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace k3::launch
