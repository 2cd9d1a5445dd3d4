// The service command lines (docs/pipeline.md "Command lines") as a pure function of the
// options, the layout, the plan and the run's endpoints.
#include "launcher/command_lines.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

namespace k3::launch {
namespace {

using Argv = std::vector<std::string>;

ModelLayout Layout() {
  ModelLayout m;
  m.cfg.num_layers = 4;
  m.cfg.first_k_dense_replace = 1;
  m.cfg.num_experts = 8;  // 24 routed experts
  m.cfg.top_k = 2;
  return m;
}

plan::MemoryPlan Plan() {
  plan::MemoryPlan p;
  p.pinned_layers = {0, 2};
  p.expert_slots = 4;
  p.lm_head_resident = true;
  p.embed_resident = true;
  p.prefill_chunk = 192;
  return p;
}

RunEndpoints Endpoints() {
  // Anything the services accept: the function copies them verbatim.
  RunEndpoints e;
  e.bin_dir = "/opt/k3/bin";
  e.control = "ipc://@k3-1/control";
  e.trunk = "ipc://@k3-1/trunk";
  e.experts = "ipc://@k3-1/experts";
  e.compute = "ipc://@k3-1/compute";
  e.tokenizer = "ipc://@k3-1/tokenizer";
  e.pinned_arena = "fd:5";
  e.ring_arena = "fd:6";
  e.experts_arena = "fd:7";
  e.embed_arena = "fd:8";
  return e;
}

LaunchOptions Options() {
  LaunchOptions o;
  o.model = "/models/k3";
  o.io = "direct";
  o.inflight = 3;
  return o;
}

const ServiceCommand& Find(const std::vector<ServiceCommand>& v, const std::string& name) {
  const auto it = std::find_if(v.begin(), v.end(), [&](const ServiceCommand& c) { return c.name == name; });
  if (it == v.end()) throw std::runtime_error("no " + name);
  return *it;
}

bool Has(const Argv& a, const std::string& flag) { return std::find(a.begin(), a.end(), flag) != a.end(); }
std::string After(const Argv& a, const std::string& flag) {
  const auto it = std::find(a.begin(), a.end(), flag);
  return it == a.end() || it + 1 == a.end() ? "<none>" : *(it + 1);
}

TEST(CommandLines, ExactArgvOfEachService) {
  const auto v = ServiceCommandLines(Options(), Layout(), Plan(), Endpoints(), "");
  ASSERT_EQ(v.size(), 3u);
  EXPECT_EQ(v[0].name, "trunk-reader");
  EXPECT_EQ(v[1].name, "expert-fetcher");
  EXPECT_EQ(v[2].name, "compute");
  EXPECT_EQ(v[0].argv, (Argv{"/opt/k3/bin/k3-trunk-reader", "--model", "/models/k3", "--control", "ipc://@k3-1/control",
                             "--bind", "ipc://@k3-1/trunk", "--pinned-arena", "fd:5", "--ring-arena", "fd:6", "--pin",
                             "0,2", "--io", "direct", "--inflight", "3"}));
  EXPECT_EQ(v[1].argv, (Argv{"/opt/k3/bin/k3-expert-fetcher", "--model", "/models/k3", "--control",
                             "ipc://@k3-1/control", "--bind", "ipc://@k3-1/experts", "--arena", "fd:7", "--io",
                             "direct", "--inflight", "3"}));
  // 4 slots, 2 x top_k: hints would be possible but two of four layers stream.
  EXPECT_EQ(v[2].argv, (Argv{"/opt/k3/bin/k3-compute", "--pipeline", "--model", "/models/k3", "--control",
                             "ipc://@k3-1/control", "--endpoint", "ipc://@k3-1/compute", "--trunk",
                             "ipc://@k3-1/trunk", "--experts", "ipc://@k3-1/experts", "--pinned-arena", "fd:5",
                             "--ring-arena", "fd:6", "--experts-arena", "fd:7", "--expert-inputs", "f32",
                             "--prefill-chunk", "192"}));
  EXPECT_TRUE(v[0].restartable);
  EXPECT_TRUE(v[1].restartable);
  EXPECT_FALSE(v[2].restartable);
}

TEST(CommandLines, StreamedHeadAndEmbeddingGoToReaderAndCompute) {
  plan::MemoryPlan p = Plan();
  p.lm_head_resident = false;
  p.embed_resident = false;
  const auto v = ServiceCommandLines(Options(), Layout(), p, Endpoints(), "");
  for (const char* s : {"trunk-reader", "compute"}) {
    SCOPED_TRACE(s);
    EXPECT_TRUE(Has(Find(v, s).argv, "--stream-lm-head"));
    EXPECT_EQ(After(Find(v, s).argv, "--embed-arena"), "fd:8");
  }
  EXPECT_FALSE(Has(Find(v, "expert-fetcher").argv, "--stream-lm-head"));
}

TEST(CommandLines, OptionalFlags) {
  LaunchOptions o = Options();
  o.threads = 3;
  o.expert_inputs = "bf16";
  o.probe_membw = true;
  o.dump_logits = "/tmp/l.bin";
  o.dump_cache_trace = "/tmp/trace";
  o.expert_server = {"tcp://10.0.0.2:5557", "tcp://10.0.0.3:5557"};
  o.expert_server_timeout = 2.5;
  o.max_batch = 4;
  const auto v = ServiceCommandLines(o, Layout(), Plan(), Endpoints(), "/vocab");
  const Argv& c = Find(v, "compute").argv;
  EXPECT_EQ(After(c, "--max-batch"), "4");
  EXPECT_EQ(After(c, "--threads"), "3");
  EXPECT_EQ(After(c, "--expert-inputs"), "bf16");
  EXPECT_TRUE(Has(c, "--probe-membw"));
  EXPECT_EQ(After(c, "--dump-logits"), "/tmp/l.bin");
  const Argv& x = Find(v, "expert-fetcher").argv;
  EXPECT_EQ(After(x, "--dump-cache-trace"), "/tmp/trace");
  EXPECT_EQ(After(x, "--remote"), "tcp://10.0.0.2:5557");
  // Every server, in order, each after its own --remote.
  const auto second = std::find(std::find(x.begin(), x.end(), "--remote") + 1, x.end(), "--remote");
  ASSERT_NE(second, x.end());
  EXPECT_EQ(*(second + 1), "tcp://10.0.0.3:5557");
  EXPECT_EQ(After(x, "--remote-timeout"), "2.5");
  ASSERT_EQ(v.size(), 4u);
  EXPECT_EQ(v[3].argv, (Argv{"/opt/k3/bin/k3-tokenizer", "serve", "--vocab", "/vocab", "--control",
                             "ipc://@k3-1/control", "--bind", "ipc://@k3-1/tokenizer"}));
  EXPECT_TRUE(v[3].restartable);
  // No threads flag at 0 (compute takes every core).
  o.threads = 0;
  o.max_batch = 1;  // the default: compute's own default, no flag
  EXPECT_FALSE(Has(Find(ServiceCommandLines(o, Layout(), Plan(), Endpoints(), ""), "compute").argv, "--threads"));
  EXPECT_FALSE(Has(Find(ServiceCommandLines(o, Layout(), Plan(), Endpoints(), ""), "compute").argv, "--max-batch"));
}

// The plan's prefix-cache region is compute's --prefix-cache bound, in bytes; off: no flag.
TEST(CommandLines, PrefixCacheBoundFromThePlan) {
  plan::MemoryPlan p = Plan();
  EXPECT_FALSE(Has(Find(ServiceCommandLines(Options(), Layout(), p, Endpoints(), ""), "compute").argv, "--prefix-cache"));
  p.prefix_cache = 123456789;
  EXPECT_EQ(After(Find(ServiceCommandLines(Options(), Layout(), p, Endpoints(), ""), "compute").argv, "--prefix-cache"),
            "123456789");
}

// prefix_store: compute gets the directory made absolute, the cap in bytes and the interval.
TEST(CommandLines, PrefixStoreFlagsGoToCompute) {
  EXPECT_FALSE(Has(Find(ServiceCommandLines(Options(), Layout(), Plan(), Endpoints(), ""), "compute").argv,
                   "--prefix-store"));
  LaunchOptions o = Options();
  o.prefix_store = "rel/store";
  o.prefix_store_size = "2G";
  o.prefix_store_interval = 512;
  const std::vector<std::string> c = Find(ServiceCommandLines(o, Layout(), Plan(), Endpoints(), ""), "compute").argv;
  EXPECT_EQ(After(c, "--prefix-store"), (std::filesystem::current_path() / "rel/store").string());
  EXPECT_EQ(After(c, "--prefix-store-size"), std::to_string(int64_t{2} << 30));
  EXPECT_EQ(After(c, "--prefix-store-interval"), "512");
}

TEST(CommandLines, WarmWhenEveryExpertHasASlotAndHintsWhenAllPinned) {
  plan::MemoryPlan p = Plan();
  p.expert_slots = 24;
  auto v = ServiceCommandLines(Options(), Layout(), p, Endpoints(), "");
  EXPECT_TRUE(Has(Find(v, "expert-fetcher").argv, "--warm"));
  EXPECT_FALSE(Has(Find(v, "compute").argv, "--prefetch-hints"));
  EXPECT_STREQ(HintsOffReason(Options(), Layout(), p), "every expert has a slot");

  p.expert_slots = 4;
  p.pinned_layers = {0, 1, 2, 3};
  v = ServiceCommandLines(Options(), Layout(), p, Endpoints(), "");
  EXPECT_FALSE(Has(Find(v, "expert-fetcher").argv, "--warm"));
  EXPECT_TRUE(Has(Find(v, "compute").argv, "--prefetch-hints"));
  EXPECT_EQ(HintsOffReason(Options(), Layout(), p), nullptr);

  LaunchOptions o = Options();
  o.prefetch_hints = false;
  EXPECT_FALSE(Has(Find(ServiceCommandLines(o, Layout(), p, Endpoints(), ""), "compute").argv, "--prefetch-hints"));
  p.expert_slots = 3;  // < 2 x top_k
  EXPECT_STREQ(HintsOffReason(Options(), Layout(), p), "fewer than 2 x top_k expert slots");
}

TEST(CommandLines, EndpointsLiveUnderTheRunName) {
  const RunEndpoints e = EndpointsIn("@k3-4242-00ff", "/bin");
  EXPECT_EQ(e.control, "ipc://@k3-4242-00ff/control");
  EXPECT_EQ(e.compute, "ipc://@k3-4242-00ff/compute");
  EXPECT_EQ(e.trunk, "ipc://@k3-4242-00ff/trunk");
  EXPECT_EQ(e.experts, "ipc://@k3-4242-00ff/experts");
  EXPECT_EQ(e.tokenizer, "ipc://@k3-4242-00ff/tokenizer");
  EXPECT_TRUE(e.pinned_arena.empty());
}

}  // namespace
}  // namespace k3::launch

namespace k3::launch {
namespace {

// --serve: k3-server's argv names the run's endpoints, the served name (the model directory's by
// default), the queue and the request defaults; the API key never appears in it.
TEST(CommandLines, ServerArgv) {
  LaunchOptions o = Options();
  o.model = "/models/k3-demo-tiny/";
  o.serve = "127.0.0.1:8080";
  o.api_key = "sekrit";
  o.max_batch = 2;
  o.queue_size = 5;
  o.context = 512;
  o.sampling.temperature = 0.5f;
  o.max_tokens_default = 256;
  o.max_tokens_limit = 4096;
  ModelLayout m = Layout();
  m.cfg.vocab_size = 4352;
  const ServiceCommand c = ServerCommandLine(o, m, Plan(), Endpoints(), {4097, 4098}, {"trunk-reader", "compute"});
  EXPECT_EQ(c.name, "server");
  EXPECT_FALSE(c.restartable);
  const Argv& a = c.argv;
  EXPECT_EQ(a[0], "/opt/k3/bin/k3-server");
  EXPECT_EQ(After(a, "--compute"), "ipc://@k3-1/compute");
  EXPECT_EQ(After(a, "--tokenizer"), "ipc://@k3-1/tokenizer");
  EXPECT_EQ(After(a, "--control"), "ipc://@k3-1/control");
  EXPECT_EQ(After(a, "--listen"), "127.0.0.1:8080");
  EXPECT_EQ(After(a, "--model-name"), "k3-demo-tiny");
  EXPECT_EQ(After(a, "--vocab-size"), "4352");
  EXPECT_EQ(After(a, "--context"), "512");
  EXPECT_EQ(After(a, "--max-batch"), "2");
  EXPECT_EQ(After(a, "--queue-size"), "5");
  EXPECT_EQ(After(a, "--threads"), "11");  // max_batch + queue_size + 4
  EXPECT_EQ(After(a, "--stop-ids"), "4097,4098");
  EXPECT_EQ(After(a, "--wait-for"), "trunk-reader,compute");
  EXPECT_EQ(After(a, "--prefill-chunk"), "192");  // the plan's chunk, not the cap
  EXPECT_EQ(After(a, "--temperature"), "0.5");
  EXPECT_EQ(After(a, "--max-tokens-default"), "256");
  EXPECT_EQ(After(a, "--max-tokens-limit"), "4096");
  EXPECT_FALSE(Has(a, "sekrit"));
  EXPECT_FALSE(Has(a, "--insecure"));
  o.served_model_name = "k3";
  o.http_threads = 3;
  const Argv b = ServerCommandLine(o, m, Plan(), Endpoints(), {}, {}).argv;
  EXPECT_EQ(After(b, "--model-name"), "k3");
  EXPECT_EQ(After(b, "--threads"), "3");
  EXPECT_FALSE(Has(b, "--stop-ids"));
}

}  // namespace
}  // namespace k3::launch

namespace k3::launch {
namespace {

// docs/pipeline.md "Command lines": the flags written for each binary (its entry runs until the
// next binary's name or the block's end).
std::map<std::string, std::set<std::string>> DocumentedFlags() {
  std::ifstream in(std::string(K3_SOURCE_DIR) + "/docs/pipeline.md");
  std::stringstream text;
  text << in.rdbuf();
  const std::string doc = text.str();
  const size_t at = doc.find("\n## Command lines");
  std::map<std::string, std::set<std::string>> flags;
  if (at == std::string::npos) return flags;
  std::istringstream lines(doc.substr(at + 1));
  std::string line, binary;
  bool in_block = false;
  while (std::getline(lines, line)) {
    if (line.rfind("    ", 0) != 0) {
      if (in_block) break;
      continue;
    }
    in_block = true;
    if (line.rfind("    k3-", 0) == 0) binary = line.substr(4, line.find(' ', 4) - 4);
    std::istringstream words(line);
    for (std::string w; words >> w;) {
      const size_t dash = w.find("--");
      if (dash == std::string::npos) continue;
      w = w.substr(dash);
      w = w.substr(0, w.find_first_of("]`)…,"));
      if (w.size() > 2) flags[binary].insert(w);
    }
  }
  return flags;
}

void ExpectDocumented(const ServiceCommand& c, const std::map<std::string, std::set<std::string>>& doc) {
  const std::string binary = std::filesystem::path(c.argv[0]).filename().string();
  const auto it = doc.find(binary);
  ASSERT_NE(it, doc.end()) << "docs/pipeline.md has no command line of " << binary;
  for (const std::string& a : c.argv) {
    if (a.rfind("--", 0) == 0) {
      EXPECT_TRUE(it->second.count(a)) << binary << " is given " << a << ", which docs/pipeline.md leaves out";
    }
  }
}

// Every flag k3-launch passes is in docs/pipeline.md's "spawns exactly these" (it lacked
// --max-batch, --prefix-cache and the --remote-*-key flags).
TEST(CommandLines, EveryFlagPassedIsDocumented) {
  const auto doc = DocumentedFlags();
  LaunchOptions o = Options();
  o.threads = 3;
  o.probe_membw = true;
  o.dump_logits = "/tmp/l.bin";
  o.dump_cache_trace = "/tmp/trace";
  o.expert_server = {"tcp://10.0.0.2:5557"};
  o.expert_server_key = {"/k/server"};
  o.client_key = "/k/client_secret";
  o.manifest = "/m.json";
  o.no_verify = true;
  o.max_batch = 4;
  o.prefix_store = "/var/k3-store";
  plan::MemoryPlan streamed = Plan();
  streamed.lm_head_resident = false;
  streamed.embed_resident = false;
  streamed.prefix_cache = 1 << 20;
  plan::MemoryPlan hints = Plan();  // all layers pinned, some experts streamed: hints on
  hints.pinned_layers = {0, 1, 2, 3};
  plan::MemoryPlan warm = Plan();
  warm.expert_slots = 24;
  for (const plan::MemoryPlan& p : {streamed, hints, warm})
    for (const ServiceCommand& c : ServiceCommandLines(o, Layout(), p, Endpoints(), "/vocab")) ExpectDocumented(c, doc);
  EXPECT_TRUE(Has(Find(ServiceCommandLines(o, Layout(), hints, Endpoints(), ""), "compute").argv, "--prefetch-hints"));
  o.serve = "127.0.0.1:8080";
  o.insecure = true;
  o.no_think = true;
  o.thinking_effort_given = true;
  ModelLayout m = Layout();
  m.cfg.vocab_size = 100;
  ExpectDocumented(ServerCommandLine(o, m, Plan(), Endpoints(), {1, 2}, {"compute"}), doc);
}

// Serving with a tokenizer: compute gets its directory (absolute) for constrained requests
// (docs/pipeline.md "Command lines"); a one-shot run does not.
TEST(CommandLines, ComputeGetsTheTokenizerWhenServing) {
  LaunchOptions o = Options();
  EXPECT_FALSE(Has(Find(ServiceCommandLines(o, Layout(), Plan(), Endpoints(), "/vocab"), "compute").argv, "--tokenizer"));
  o.serve = "127.0.0.1:8080";
  EXPECT_EQ(After(Find(ServiceCommandLines(o, Layout(), Plan(), Endpoints(), "/vocab"), "compute").argv, "--tokenizer"), "/vocab");
  EXPECT_FALSE(Has(Find(ServiceCommandLines(o, Layout(), Plan(), Endpoints(), ""), "compute").argv, "--tokenizer"));
}

}  // namespace
}  // namespace k3::launch

