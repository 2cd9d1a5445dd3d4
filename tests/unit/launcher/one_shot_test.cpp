// The one-shot exchange's bookkeeping (launcher/one_shot.h) and the live line a service's
// Stats draw (launcher/stats_progress.h).
#include "launcher/one_shot.h"

#include <gtest/gtest.h>

#include "launcher/stats_progress.h"
#include "tests/unit/ipc/token_message.h"

namespace k3::launch {
namespace {

namespace cp = ipc::compute;

TEST(OneShot, TheGenerateCarriesTheRunsOptions) {
  LaunchOptions o;
  o.gen = 7;
  o.context = 1LL << 40;  // beyond int32: max_positions saturates
  o.prefill_chunk = 16;
  o.spec = 3;
  o.logprobs = 2;
  const cp::Generate g = OneShotGenerate(o, {5, 6}, {2, 9});
  EXPECT_EQ(g.request_id, 1u);
  EXPECT_EQ(g.ids, std::vector<int32_t>({5, 6}));
  EXPECT_EQ(g.gen, 7);
  EXPECT_EQ(g.stop_ids, std::vector<int32_t>({2, 9}));
  EXPECT_EQ(g.max_positions, INT32_MAX);
  EXPECT_EQ(g.prefill_chunk, 0);  // compute's --prefill-chunk: the plan's chunk, bounded by the cap 16
  EXPECT_EQ(g.spec, 3);
  EXPECT_EQ(g.logprobs, 2);
  EXPECT_FALSE(g.keep_state);
  o.load_state = "s.k3state";
  EXPECT_TRUE(OneShotGenerate(o, {5}, {}).keep_state);  // appended to the loaded sequence
}

TEST(OneShot, OnlyTheNextTokenOfTheGenerateCounts) {
  OneShot s(/*keep_logprobs=*/true);
  const auto t0 = OneShot::Clock::now();
  EXPECT_FALSE(s.sent());
  s.Sent(3, t0);
  EXPECT_TRUE(s.sent());
  EXPECT_FALSE(s.first_token_seconds());  // none yet
  EXPECT_TRUE(s.OnToken(ipc::ATokenMessage(1, 40, 0), t0 + std::chrono::milliseconds(10)));
  EXPECT_FALSE(s.OnToken(ipc::ATokenMessage(1, 41, 0), t0));  // a repeat
  EXPECT_FALSE(s.OnToken(ipc::ATokenMessage(1, 41, 2), t0));  // a gap
  EXPECT_FALSE(s.OnToken(ipc::ATokenMessage(7, 41, 1), t0));  // another request
  EXPECT_TRUE(s.OnToken(ipc::ATokenMessage(1, 42, 1), t0 + std::chrono::milliseconds(60)));
  EXPECT_EQ(s.generated(), std::vector<int32_t>({40, 42}));
  EXPECT_EQ(s.tokens().size(), 2u);
  ASSERT_EQ(s.token_seconds().size(), 1u);
  EXPECT_NEAR(s.token_seconds()[0], 0.05, 1e-9);
  EXPECT_NEAR(s.decode_seconds(), 0.05, 1e-9);
  ASSERT_TRUE(s.first_token_seconds());
  EXPECT_NEAR(*s.first_token_seconds(), 0.01, 1e-9);  // the Generate sent -> the first Token here

  cp::Done other;
  other.request_id = 2;
  EXPECT_FALSE(s.OnDone(other));
  EXPECT_FALSE(s.done());
  cp::Done d;
  d.request_id = 1;
  d.reason = cp::StopReason::kStopId;
  d.stats.generated_tokens = 2;
  d.stats.prompt_tokens = 3;
  EXPECT_EQ(s.OnDone(d), std::optional<std::string>(""));
  EXPECT_EQ(s.finish_reason(), cp::StopReason::kStopId);
  d.stats.generated_tokens = 4;  // compute sent two that never arrived
  EXPECT_EQ(*s.OnDone(d),
            "[launch] warning: compute generated 4 tokens for a prompt of 3, but 2 arrived for a prompt of 3");
  OneShot plain(false);
  plain.OnToken(ipc::ATokenMessage(1, 40, 0), t0);
  EXPECT_TRUE(plain.tokens().empty());  // no --logprobs: the Tokens are not kept
}

TEST(StatsProgress, PinningThenPrefillEachEndWithOnePermanentLine) {
  StatsProgress p;
  const std::map<std::string, double> half = {{"pin_bytes_done", 1 << 20}, {"pin_bytes_total", 2 << 20}};
  EXPECT_EQ(p.Update("trunk-reader", half, 1, 0, false).kind, ProgressStep::kShow);
  const std::map<std::string, double> all = {{"pin_bytes_done", 2 << 20}, {"pin_bytes_total", 2 << 20}, {"pin_seconds", 2}};
  const ProgressStep done = p.Update("trunk-reader", all, 9, 0, false);
  EXPECT_EQ(done.kind, ProgressStep::kInfo);
  EXPECT_NE(done.text.find("pinning trunk: 2.0 MiB of 2.0 MiB, 100%"), std::string::npos) << done.text;
  EXPECT_EQ(p.Update("trunk-reader", all, 9, 0, false).kind, ProgressStep::kNone);  // once
  EXPECT_EQ(p.Update("trunk-reader", {}, 9, 0, false).kind, ProgressStep::kNone);

  const std::map<std::string, double> pre = {{"prefill_tokens_done", 120}, {"prefill_tokens_total", 120}};
  EXPECT_EQ(p.Update("compute", pre, 9, 4, false), (ProgressStep{ProgressStep::kInfo,
                                                                  "[launch] prefill: 120 of 120, 100%, 30.0 tokens/s"}));
  EXPECT_EQ(p.Update("compute", pre, 9, 4, false).kind, ProgressStep::kNone);
}

// A server's requests: each prefill has its own clock (compute's prefill_seconds, not the first
// Generate's) and ends with its own line, also when two are prefilled in one batch.
TEST(StatsProgress, EveryServerRequestGetsItsLineAtItsOwnRate) {
  StatsProgress p;
  auto stats = [](double request, double done, double total, double seconds) {
    return std::map<std::string, double>{{"prefill_request", request}, {"prefill_tokens_done", done},
                                         {"prefill_tokens_total", total}, {"prefill_seconds", seconds}};
  };
  // since_generate (500 s) is the clock of no request in serve mode: unused.
  EXPECT_EQ(p.Update("compute", stats(7, 40, 200, 0.5), 900, 500, false),
            (ProgressStep{ProgressStep::kShow, "[launch] prefill: 40 of 200, 20%, 80.0 tokens/s, ETA 2 s"}));
  EXPECT_EQ(p.Update("compute", stats(8, 10, 100, 0.25), 900, 500, false).kind, ProgressStep::kShow);
  EXPECT_EQ(p.Update("compute", stats(7, 200, 200, 2), 900, 500, false),
            (ProgressStep{ProgressStep::kInfo, "[launch] prefill: 200 of 200, 100%, 100.0 tokens/s"}));
  EXPECT_EQ(p.Update("compute", stats(7, 200, 200, 2), 900, 500, false).kind, ProgressStep::kNone);  // once
  EXPECT_EQ(p.Update("compute", stats(8, 100, 100, 0.5), 900, 500, false),
            (ProgressStep{ProgressStep::kInfo, "[launch] prefill: 100 of 100, 100%, 200.0 tokens/s"}));
  EXPECT_EQ(p.Update("compute", stats(9, 12, 12, 0.01), 900, 500, false),
            (ProgressStep{ProgressStep::kInfo, "[launch] prefill: 12 of 12, 100%, 1200.0 tokens/s"}));
}

TEST(StatsProgress, EveryChatTurnHasALivePrefillLineOnly) {
  StatsProgress p;
  const std::map<std::string, double> part = {{"prefill_tokens_done", 30}, {"prefill_tokens_total", 120}};
  const std::map<std::string, double> all = {{"prefill_tokens_done", 120}, {"prefill_tokens_total", 120}};
  for (int turn = 0; turn < 2; ++turn) {
    EXPECT_EQ(p.Update("compute", part, 9, 3, true),
              (ProgressStep{ProgressStep::kShow, "[launch] prefill: 30 of 120, 25%, 10.0 tokens/s, ETA 9 s"}));
    EXPECT_EQ(p.Update("compute", all, 9, 4, true).kind, ProgressStep::kClear);
  }
}

}  // namespace
}  // namespace k3::launch
