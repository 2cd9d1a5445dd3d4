// k3-launch's sampling and scoring options (docs/sampling.md): TOML keys, flags over the TOML,
// range checks, and the report's sampling / logprobs / perplexity fields.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "common/error.h"
#include "common/sampling_flags.h"
#include "launcher/option_table.h"
#include "launcher/options.h"
#include "launcher/report.h"
#include "tests/unit/ipc/token_message.h"

namespace k3::launch {
namespace {

int Code(const std::function<void()>& f, std::string* msg = nullptr) {
  try {
    f();
    return 0;
  } catch (const Error& e) {
    if (msg) *msg = e.what();
    return e.code();
  }
}

LaunchOptions Valid() {  // through the TOML (assigning literals here trips GCC 12's -Wrestrict)
  LaunchOptions o;
  ApplyToml("model = \"m\"\nbudget = \"1G\"\n", "t.toml", "", o);
  return o;
}

TEST(SamplingOptions, TomlKeys) {
  LaunchOptions o;
  ASSERT_EQ(Code([&] {
              ApplyToml("temperature = 0.7\ntop_k = 40\ntop_p = 0.9\nmin_p = 0.05\nrepeat_penalty = 1.1\n"
                        "repeat_last_n = -1\npresence_penalty = 0.5\nfrequency_penalty = -0.25\nseed = 42\n"
                        "logprobs = 3\nperplexity = true\n",
                        "t.toml", "", o);
            }),
            0);
  EXPECT_FLOAT_EQ(o.sampling.temperature, 0.7f);
  EXPECT_EQ(o.sampling.top_k, 40);
  EXPECT_FLOAT_EQ(o.sampling.top_p, 0.9f);
  EXPECT_FLOAT_EQ(o.sampling.min_p, 0.05f);
  EXPECT_FLOAT_EQ(o.sampling.repeat_penalty, 1.1f);
  EXPECT_EQ(o.sampling.repeat_last_n, -1);
  EXPECT_FLOAT_EQ(o.sampling.presence_penalty, 0.5f);
  EXPECT_FLOAT_EQ(o.sampling.frequency_penalty, -0.25f);
  EXPECT_EQ(o.sampling.seed, 42u);
  EXPECT_TRUE(o.seed_given);
  EXPECT_EQ(o.logprobs, 3);
  EXPECT_TRUE(o.perplexity);
  // An integer where a number is wanted is fine; wrong types are exit 2 naming the key.
  LaunchOptions p;
  EXPECT_EQ(Code([&] { ApplyToml("temperature = 1\n", "t.toml", "", p); }), 0);
  EXPECT_FLOAT_EQ(p.sampling.temperature, 1.0f);
  const std::pair<const char*, const char*> bad[] = {{"temperature", "\"hot\""}, {"top_k", "1.5"}, {"seed", "-1"},
                                                     {"perplexity", "1"}, {"logprobs", "true"}};
  for (const auto& [key, value] : bad) {
    std::string msg;
    LaunchOptions q;
    EXPECT_EQ(Code([&] { ApplyToml(std::string(key) + " = " + value, "t.toml", "", q); }, &msg), kExitUsage) << key;
    EXPECT_NE(msg.find(std::string("'") + key + "'"), std::string::npos) << msg;
  }
}

TEST(SamplingOptions, RangesAreCheckedWithTheFlagName) {
  EXPECT_EQ(Code([] { CheckOptions(Valid()); }), 0);
  struct Case {
    const char* flag;
    std::function<void(LaunchOptions&)> set;
  };
  const Case cases[] = {
      {"--temperature", [](LaunchOptions& o) { o.sampling.temperature = -0.1f; }},
      {"--temperature", [](LaunchOptions& o) { o.sampling.temperature = INFINITY; }},
      {"--top-k", [](LaunchOptions& o) { o.sampling.top_k = -1; }},
      {"--top-p", [](LaunchOptions& o) { o.sampling.top_p = 0; }},
      {"--top-p", [](LaunchOptions& o) { o.sampling.top_p = 1.01f; }},
      {"--min-p", [](LaunchOptions& o) { o.sampling.min_p = -0.01f; }},
      {"--repeat-penalty", [](LaunchOptions& o) { o.sampling.repeat_penalty = 0; }},
      {"--repeat-last-n", [](LaunchOptions& o) { o.sampling.repeat_last_n = -2; }},
      {"--presence-penalty", [](LaunchOptions& o) { o.sampling.presence_penalty = 2.5f; }},
      {"--frequency-penalty", [](LaunchOptions& o) { o.sampling.frequency_penalty = NAN; }},
      {"--logprobs", [](LaunchOptions& o) { o.logprobs = 101; }},
      {"--logprobs", [](LaunchOptions& o) { o.logprobs = -2; }},
  };
  for (const Case& c : cases) {
    LaunchOptions o = Valid();
    c.set(o);
    std::string msg;
    EXPECT_EQ(Code([&] { CheckOptions(o); }, &msg), kExitUsage) << c.flag;
    EXPECT_EQ(msg.rfind(c.flag, 0), 0u) << msg;
  }
  // The edges are allowed.
  LaunchOptions o = Valid();
  o.sampling.top_p = 1;
  o.sampling.min_p = 1;
  o.sampling.presence_penalty = -2;
  o.sampling.frequency_penalty = 2;
  o.sampling.repeat_last_n = -1;
  o.logprobs = 100;
  EXPECT_EQ(Code([&] { CheckOptions(o); }), 0);
}

TEST(SamplingOptions, FlagsOverTheTomlAndARandomSeedOtherwise) {
  const auto dir = std::filesystem::temp_directory_path() / ("k3-sampling-opt-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string toml = (dir / "c.toml").string();
  std::ofstream(toml) << "model = \"m\"\nbudget = \"1G\"\ntemperature = 0.5\ntop_k = 7\nseed = 3\n";
  auto parse = [&](std::vector<std::string> args) {
    args.insert(args.begin(), {"k3-launch", toml});
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    return *ParseLaunchOptions(static_cast<int>(argv.size()), argv.data());
  };
  LaunchOptions a = parse({});
  EXPECT_FLOAT_EQ(a.sampling.temperature, 0.5f);
  EXPECT_EQ(a.sampling.top_k, 7);
  EXPECT_EQ(a.sampling.seed, 3u);
  LaunchOptions b = parse({"--temperature", "0.9", "--seed", "18446744073709551615", "--logprobs", "2", "--perplexity",
                           "--min-p", "0.1"});
  EXPECT_FLOAT_EQ(b.sampling.temperature, 0.9f);
  EXPECT_EQ(b.sampling.top_k, 7);  // from the TOML
  EXPECT_EQ(b.sampling.seed, 18446744073709551615u);
  EXPECT_FLOAT_EQ(b.sampling.min_p, 0.1f);
  EXPECT_EQ(b.logprobs, 2);
  EXPECT_TRUE(b.perplexity);
  std::ofstream(toml) << "model = \"m\"\nbudget = \"1G\"\ntemperature = 0.5\n";
  // No seed anywhere: random (two parses disagree with overwhelming probability).
  EXPECT_NE(parse({}).sampling.seed, parse({}).sampling.seed);
  std::filesystem::remove_all(dir);
}

TEST(SamplingReport, LogprobsPerplexityAndSampling) {
  RunRecord r;
  r.generated_ids = {7, 8};
  r.sampling.temperature = 0.5f;
  r.sampling.seed = 99;
  ipc::compute::Token t1 = ipc::ATokenMessage(1, 7, 0), t2 = ipc::ATokenMessage(1, 8, 1);
  t1.logprob = -0.5f;
  t1.top = {{7, -0.5f}, {3, -1.5f}};
  t2.logprob = -2.0f;
  t2.top = {{1, -0.25f}, {8, -2.0f}};
  r.logprobs = std::vector<ipc::compute::Token>{t1, t2};
  r.perplexity = true;
  ipc::compute::RunStats s;
  s.scored_tokens = 4;
  s.nll_sum = 6.0;
  r.done = s;
  plan::MemoryPlan plan;
  plan.budget = 1 << 30;
  const nlohmann::json j = BuildReport(r, plan, ArenaSizes{});
  EXPECT_EQ(j["sampling"]["seed"], 99u);
  EXPECT_FLOAT_EQ(j["sampling"]["temperature"].get<float>(), 0.5f);
  ASSERT_EQ(j["logprobs"].size(), 2u);
  EXPECT_EQ(j["logprobs"][1]["id"], 8);
  EXPECT_FLOAT_EQ(j["logprobs"][1]["logprob"].get<float>(), -2.0f);
  EXPECT_EQ(j["logprobs"][1]["top"][0]["id"], 1);
  EXPECT_FLOAT_EQ(j["logprobs"][0]["top"][1]["logprob"].get<float>(), -1.5f);
  EXPECT_EQ(j["scored_tokens"], 4);
  EXPECT_DOUBLE_EQ(j["nll_per_token"].get<double>(), 1.5);
  EXPECT_DOUBLE_EQ(j["perplexity"].get<double>(), std::exp(1.5));
  bool line = false;
  for (const std::string& l : SummaryLines(j, plan.budget)) line |= l.find("prompt perplexity") != std::string::npos;
  EXPECT_TRUE(line);
  // Without the options, no such fields; a one-token prompt scores nothing: null.
  RunRecord plain;
  const nlohmann::json k = BuildReport(plain, plan, ArenaSizes{});
  EXPECT_FALSE(k.contains("logprobs"));
  EXPECT_FALSE(k.contains("perplexity"));
  plain.perplexity = true;
  plain.done = ipc::compute::RunStats{};
  EXPECT_TRUE(BuildReport(plain, plan, ArenaSizes{})["perplexity"].is_null());
}

}  // namespace
}  // namespace k3::launch

namespace k3::launch {
namespace {

// k3-server's sampling defaults come from the same registration as k3-launch's keys: each
// parameter of common/sampling_flags.h is a key of the option table, and its flag sets the field.
TEST(SharedSamplingFlags, ServerRegistrationIsTheLaunchersKeys) {
  ipc::compute::Sampling s;
  CLI::App app;
  AddSamplingParamFlags(app, s);
  std::vector<std::string> args = {"x", "--temperature", "0.5", "--top-k", "7", "--top-p", "0.9", "--min-p", "0.1",
                                   "--repeat-penalty", "1.5", "--repeat-last-n", "-1", "--presence-penalty", "0.25",
                                   "--frequency-penalty", "-0.5"};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  app.parse(static_cast<int>(argv.size()), argv.data());
  EXPECT_FLOAT_EQ(s.temperature, 0.5f);
  EXPECT_EQ(s.top_k, 7);
  EXPECT_FLOAT_EQ(s.top_p, 0.9f);
  EXPECT_FLOAT_EQ(s.min_p, 0.1f);
  EXPECT_FLOAT_EQ(s.repeat_penalty, 1.5f);
  EXPECT_EQ(s.repeat_last_n, -1);
  EXPECT_FLOAT_EQ(s.presence_penalty, 0.25f);
  EXPECT_FLOAT_EQ(s.frequency_penalty, -0.5f);
  int registered = 0;
  for (const CLI::Option* o : app.get_options()) {
    if (o->get_name() == "--help") continue;
    ++registered;
    std::string key = o->get_name().substr(2);
    std::replace(key.begin(), key.end(), '-', '_');
    const OptionSpec* spec = FindLaunchOption(key);
    ASSERT_NE(spec, nullptr) << o->get_name() << " is no k3-launch key";
    EXPECT_TRUE(spec->services & kToServer) << key << " is not passed to k3-server";
  }
  EXPECT_EQ(registered, 8);
}

}  // namespace
}  // namespace k3::launch
