// services/server/timings: llama.cpp's "timings" object from compute's RunStats of a job.
#include "services/server/timings.h"

#include <gtest/gtest.h>

namespace k3::server {
namespace {

TEST(Timings, LlamaCppNamesFromRunStats) {
  Job j(1, RequestSpec{});
  j.prompt_tokens = 120;
  j.cached_tokens = 20;
  j.completion_tokens = 11;  // the first from the prompt pass, then 10 decode passes
  j.prefill_seconds = 0.5;
  j.seconds_per_token = 0.04;
  const nlohmann::json t = TimingsJson(j);
  EXPECT_EQ(t["cache_n"], 20);
  EXPECT_EQ(t["prompt_n"], 100);
  EXPECT_DOUBLE_EQ(t["prompt_ms"].get<double>(), 500);
  EXPECT_DOUBLE_EQ(t["prompt_per_token_ms"].get<double>(), 5);
  EXPECT_DOUBLE_EQ(t["prompt_per_second"].get<double>(), 200);
  EXPECT_EQ(t["predicted_n"], 11);
  EXPECT_DOUBLE_EQ(t["predicted_ms"].get<double>(), 400);
  EXPECT_DOUBLE_EQ(t["predicted_per_token_ms"].get<double>(), 40);
  EXPECT_DOUBLE_EQ(t["predicted_per_second"].get<double>(), 25);
  EXPECT_EQ(t.size(), 9u);
}

TEST(Timings, OneGeneratedIdHasNoDecodePassAndAFullyCachedPromptNoRate) {
  Job j(1, RequestSpec{});
  j.prompt_tokens = 5;
  j.cached_tokens = 5;
  j.completion_tokens = 1;
  j.prefill_seconds = 0;
  j.seconds_per_token = 0.3;  // compute reports the prefill time here when there was no decode pass
  const nlohmann::json t = TimingsJson(j);
  EXPECT_EQ(t["prompt_n"], 0);
  EXPECT_EQ(t["prompt_per_token_ms"], 0.0);
  EXPECT_EQ(t["prompt_per_second"], 0.0);
  EXPECT_EQ(t["predicted_ms"], 0.0);
  EXPECT_EQ(t["predicted_per_token_ms"], 0.0);
  EXPECT_EQ(t["predicted_per_second"], 0.0);
}

}  // namespace
}  // namespace k3::server
