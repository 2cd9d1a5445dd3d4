// The run report (JSON for --out) and the summary lines, from a recorded run.
#include "launcher/report.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "common/error.h"

namespace k3::launch {
namespace {

RunRecord Recorded() {
  RunRecord r;
  r.prompt_ids = {1, 5, 9};
  r.generated_ids = {7, 8, 9, 10};
  r.token_seconds = {0.5, 0.1, 0.3};
  ipc::compute::RunStats s;
  s.prompt_tokens = 3;
  s.generated_tokens = 4;
  s.prefill_seconds = 0.25;
  s.seconds_per_token = 0.2;
  r.done = s;
  r.finish_reason = ipc::compute::StopReason::kLength;
  r.run_seconds = 2.0;
  r.first_token_seconds = 0.75;
  r.service_stats["trunk-reader"]["bytes_read"] = 4000;
  r.service_stats["expert-fetcher"]["bytes_read"] = 800;
  r.service_stats["expert-fetcher"]["hits"] = 3;
  r.service_stats["expert-fetcher"]["misses"] = 1;
  r.service_stats["compute"]["run_trunk_wait_seconds"] = 0.3;
  r.service_stats["compute"]["run_expert_wait_seconds"] = 0.2;
  r.service_stats["compute"]["decode_steps"] = 3;
  r.service_stats["compute"]["decode_trunk_wait_seconds"] = 0.06;
  r.service_stats["compute"]["decode_expert_wait_seconds"] = 0.03;
  r.peak["compute"] = {1000, 400};
  r.peak["launcher"] = {100, 0};
  r.restarts = {{"trunk-reader", 1}, {"compute", 0}};
  r.rejected_messages = 2;
  r.expert_inputs = "f32";
  return r;
}

plan::MemoryPlan Plan() {
  plan::MemoryPlan p;
  p.budget = 1 << 30;
  p.total = 1 << 29;
  return p;
}

TEST(Report, FieldsFromTheRecord) {
  ArenaSizes a;
  a.pinned = 10000;
  a.ring = 2000;
  a.experts = 3000;
  const nlohmann::json r = BuildReport(Recorded(), Plan(), a);
  EXPECT_EQ(r["prompt_ids"], nlohmann::json({1, 5, 9}));
  EXPECT_EQ(r["generated_ids"].size(), 4u);
  EXPECT_FALSE(r["interrupted"].get<bool>());
  EXPECT_FALSE(r.contains("stop_reason"));
  EXPECT_EQ(r["finish_reason"], "length");
  EXPECT_DOUBLE_EQ(r["seconds_per_token"].get<double>(), 0.2);
  EXPECT_DOUBLE_EQ(r["prefill_seconds"].get<double>(), 0.25);
  EXPECT_DOUBLE_EQ(r["median_token_seconds"].get<double>(), 0.3);
  EXPECT_DOUBLE_EQ(r["trunk_bytes_per_token"].get<double>(), 1000);
  EXPECT_DOUBLE_EQ(r["expert_bytes_per_token"].get<double>(), 200);
  EXPECT_DOUBLE_EQ(r["expert_hit_rate"].get<double>(), 0.75);
  EXPECT_DOUBLE_EQ(r["compute_wait_seconds"].get<double>(), 0.5);
  EXPECT_DOUBLE_EQ(r["io_share"].get<double>(), 0.25);
  EXPECT_DOUBLE_EQ(r["trunk_wait_seconds_per_token"].get<double>(), 0.02);
  EXPECT_DOUBLE_EQ(r["expert_wait_seconds_per_token"].get<double>(), 0.01);
  // Private memory of each process (peak minus its shm) + the arenas once.
  EXPECT_EQ(r["peak_memory_total_bytes"].get<int64_t>(), (1000 - 400) + 100 + 15000);
  EXPECT_EQ(r["restarts"]["trunk-reader"].get<int>(), 1);
  EXPECT_EQ(r["rejected_messages"].get<int>(), 2);
  EXPECT_EQ(r["service_stats"]["expert-fetcher"]["hits"].get<double>(), 3);
  EXPECT_FALSE(r.contains("generated_text"));
}

TEST(Report, MissingStatsAreMinusOneAndInterruptedRunsSaySo) {
  RunRecord rec;
  rec.generated_ids = {1};
  rec.interrupted = true;
  rec.stop_reason = "interrupted by SIGINT";
  rec.generated_text = "a\xff";  // ill-formed UTF-8 is replaced when written
  const nlohmann::json r = BuildReport(rec, Plan(), ArenaSizes{});
  EXPECT_TRUE(r["interrupted"].get<bool>());
  EXPECT_EQ(r["stop_reason"], "interrupted by SIGINT");
  EXPECT_EQ(r["trunk_bytes_read"].get<double>(), -1);
  EXPECT_EQ(r["expert_hit_rate"].get<double>(), -1);
  EXPECT_EQ(r["seconds_per_token"].get<double>(), 0);
  EXPECT_FALSE(r.contains("finish_reason"));  // compute's Done never came
  const auto lines = SummaryLines(r, 1 << 30);
  ASSERT_FALSE(lines.empty());
  EXPECT_NE(lines[0].find("1 tokens"), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find("(interrupted)"), std::string::npos) << lines[0];
  const std::string path = (std::filesystem::temp_directory_path() / "k3_report_test.json").string();
  WriteReportFile(path, r);
  std::ifstream f(path);
  const nlohmann::json back = nlohmann::json::parse(f);
  EXPECT_EQ(back["generated_text"], "a\xef\xbf\xbd");
  std::filesystem::remove(path);
}

TEST(Report, SummaryLines) {
  nlohmann::json r = BuildReport(Recorded(), Plan(), ArenaSizes{});
  auto lines = SummaryLines(r, 1 << 30);
  EXPECT_EQ(lines[0], "[launch] 4 tokens (ended: length), first token 0.750 s, 0.2000 s/token, prefill 0.250 s");
  EXPECT_NE(lines[1].find("expert hit rate 0.750"), std::string::npos) << lines[1];
  EXPECT_NE(lines.back().find("of budget 1.00 GiB"), std::string::npos) << lines.back();
  for (const std::string& l : lines) EXPECT_EQ(l.find("hints"), std::string::npos) << l;
  RunRecord rec = Recorded();
  rec.prefetch_hints = true;
  lines = SummaryLines(BuildReport(rec, Plan(), ArenaSizes{}), 1 << 30);
  EXPECT_EQ(r["first_token_seconds"], 0.75);
  EXPECT_EQ(r["run_seconds"], 2.0);
  EXPECT_TRUE(std::any_of(lines.begin(), lines.end(),
                          [](const std::string& l) { return l.find("next-layer expert hints") != std::string::npos; }));
}

// No token came (a prompt cancelled before its first id): first_token_seconds is null and
// the summary leaves it out.
TEST(Report, NoFirstTokenTime) {
  RunRecord rec = Recorded();
  rec.generated_ids.clear();
  rec.token_seconds.clear();
  rec.first_token_seconds.reset();
  const nlohmann::json r = BuildReport(rec, Plan(), ArenaSizes{});
  ASSERT_TRUE(r.contains("first_token_seconds"));
  EXPECT_TRUE(r["first_token_seconds"].is_null());
  EXPECT_EQ(SummaryLines(r, 1 << 30)[0], "[launch] 0 tokens (ended: length), 0.2000 s/token, prefill 0.250 s");
}

// Prefix reuse: compute's cached_tokens and the plan's prefix-cache region; the summary says
// them only when the cache is on or something came from it.
TEST(Report, CachedTokensAndThePrefixCache) {
  nlohmann::json r = BuildReport(Recorded(), Plan(), ArenaSizes{});
  EXPECT_EQ(r["cached_tokens"], 0);
  EXPECT_EQ(r["prefix_cache_bytes"], 0);
  for (const std::string& l : SummaryLines(r, 1 << 30)) EXPECT_EQ(l.find("prefix cache"), std::string::npos) << l;
  RunRecord rec = Recorded();
  rec.done->cached_tokens = 2;
  plan::MemoryPlan p = Plan();
  p.prefix_cache = 64ll << 20;
  r = BuildReport(rec, p, ArenaSizes{});
  EXPECT_EQ(r["cached_tokens"], 2);
  EXPECT_EQ(r["prefix_cache_bytes"], 64ll << 20);
  const auto lines = SummaryLines(r, 1 << 30);
  EXPECT_TRUE(std::any_of(lines.begin(), lines.end(), [](const std::string& l) {
    return l == "[launch] 2 prompt ids from a prefix snapshot (not prefilled); prefix cache 64.0 MiB, prefix store off";
  }));
  // With a prefix store (and no cache) the line is there too, naming the directory.
  EXPECT_TRUE(r["prefix_store"].is_null());
  rec.prefix_store = "/var/k3-store";
  r = BuildReport(rec, Plan(), ArenaSizes{});
  EXPECT_EQ(r["prefix_store"], "/var/k3-store");
  const auto with_store = SummaryLines(r, 1 << 30);
  EXPECT_TRUE(std::any_of(with_store.begin(), with_store.end(), [](const std::string& l) {
    return l.rfind("[launch] 2 prompt ids from a prefix snapshot", 0) == 0 &&
           l.find("prefix store /var/k3-store") != std::string::npos;
  }));
}

TEST(Report, StopTextMakesFinishReasonStop) {
  RunRecord rec = Recorded();
  rec.finish_reason = ipc::compute::StopReason::kCancelled;
  EXPECT_EQ(BuildReport(rec, Plan(), ArenaSizes{})["finish_reason"], "cancelled");
  rec.stop_text = "\n\n";
  nlohmann::json r = BuildReport(rec, Plan(), ArenaSizes{});
  EXPECT_EQ(r["finish_reason"], "stop");
  EXPECT_EQ(r["stop_text"], "\n\n");
  rec.finish_reason = ipc::compute::StopReason::kLength;  // Done came before the text was decoded
  EXPECT_EQ(BuildReport(rec, Plan(), ArenaSizes{})["finish_reason"], "stop");
  rec.interrupted = true;
  rec.finish_reason = ipc::compute::StopReason::kInterrupted;
  EXPECT_EQ(BuildReport(rec, Plan(), ArenaSizes{})["finish_reason"], "interrupted");
}

TEST(Report, FinishReasonIsComputesDoneReason) {
  EXPECT_STREQ(FinishReasonName(ipc::compute::StopReason::kLength), "length");
  EXPECT_STREQ(FinishReasonName(ipc::compute::StopReason::kStopId), "stop");
  EXPECT_STREQ(FinishReasonName(ipc::compute::StopReason::kInterrupted), "interrupted");
  RunRecord rec = Recorded();
  rec.finish_reason = ipc::compute::StopReason::kStopId;
  nlohmann::json r = BuildReport(rec, Plan(), ArenaSizes{});
  EXPECT_EQ(r["finish_reason"], "stop");
  EXPECT_EQ(SummaryLines(r, 1 << 30)[0], "[launch] 4 tokens (ended: stop), first token 0.750 s, 0.2000 s/token, prefill 0.250 s");
  rec.finish_reason = ipc::compute::StopReason::kInterrupted;
  rec.interrupted = true;
  rec.stop_reason = "interrupted by SIGTERM";
  r = BuildReport(rec, Plan(), ArenaSizes{});
  EXPECT_EQ(r["finish_reason"], "interrupted");
  EXPECT_EQ(SummaryLines(r, 1 << 30)[0],
            "[launch] 4 tokens (ended: interrupted), first token 0.750 s, 0.2000 s/token, prefill 0.250 s (interrupted)");
}

TEST(Report, UnwritableFileIsAnOutputError) {
  try {
    WriteReportFile("/dev/full", BuildReport(Recorded(), Plan(), ArenaSizes{}));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), kExitOutput);
    EXPECT_NE(std::string(e.what()).find("/dev/full"), std::string::npos);
  }
}

}  // namespace
}  // namespace k3::launch
