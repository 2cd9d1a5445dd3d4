// k3-server's share of the plan (common/plan/server_memory.h): with --serve the plan charges a
// sixth process and k3-server's threads, connection bodies, held requests and decode cache, all
// within the budget; without --serve nothing changes. Expected values are written from the
// documented rules (docs/memory-plan.md "k3-server", docs/server.md), not from the code.
#include "common/plan/memory_plan.h"

#include <gtest/gtest.h>

#include <string>

#include "common/error.h"
#include "tests/unit/plan/synthetic_model.h"

namespace k3::plan {
namespace {

using synthetic::kGiB;
using synthetic::kMiB;

PlanModel Synthetic() { return synthetic::SyntheticPlanModel(); }

PlanOptions Serving(int64_t max_batch, int64_t queue, int64_t http_threads, int64_t body) {
  PlanOptions o;
  o.max_batch = max_batch;
  o.serve.serving = true;
  o.serve.queue_size = queue;
  o.serve.http_threads = http_threads;
  o.serve.max_body_bytes = body;
  return o;
}

int64_t RegionBytes(const MemoryPlan& p, const std::string& process, const std::string& region) {
  for (const Region& r : p.regions())
    if (r.process == process && r.region == region) return r.bytes;
  return -1;
}

TEST(ServerMemory, DefaultConnectionThreadsAreBatchPlusQueuePlusFour) {
  EXPECT_EQ(ServeHttpThreads(0, 1, 16), 21);
  EXPECT_EQ(ServeHttpThreads(0, 4, 2), 10);
  EXPECT_EQ(ServeHttpThreads(7, 4, 2), 7);
  const MemoryPlan p = MakePlan(Synthetic(), 8 * kGiB, Serving(2, 3, 0, kMiB));
  EXPECT_EQ(p.server_http_threads, 9);
  // The connection threads plus k3-server's own five (main, engine, overflow, ZeroMQ's two).
  EXPECT_EQ(p.server.threads, 9 + 5);
}

TEST(ServerMemory, ServingChargesASixthProcessAndTheServer) {
  const PlanModel m = Synthetic();
  const PlanOptions plain = Serving(1, 16, 0, kMiB);
  PlanOptions off = plain;
  off.serve.serving = false;
  const int64_t base = PlanFloor(m, off), served = PlanFloor(m, plain);
  const MemoryPlan p = MakePlan(m, served, plain);
  // One more process overhead, and k3-server's regions on top.
  EXPECT_EQ(RegionBytes(p, "all", "process-overhead"), 6 * kProcessOverheadBytes);
  const int64_t server = RegionBytes(p, "server", "threads") + RegionBytes(p, "server", "connections") +
                         RegionBytes(p, "server", "requests") + RegionBytes(p, "server", "decode-cache");
  EXPECT_EQ(served - base, kProcessOverheadBytes + server);
  // 21 connection threads, each may parse a body of up to 1 MiB: at least that much is held.
  EXPECT_GE(RegionBytes(p, "server", "connections"), 21 * kMiB);
  // Every thread has at least its first stack pages; the held requests their context's ids.
  EXPECT_GE(RegionBytes(p, "server", "threads"), 26 * 4096);
  EXPECT_GE(RegionBytes(p, "server", "requests"), 17 * 4096 * 4);
  EXPECT_GE(RegionBytes(p, "server", "decode-cache"), 1000 * 1);
  EXPECT_NE(p.Table().find("6 processes"), std::string::npos) << p.Table();
  EXPECT_NE(p.Table().find("server"), std::string::npos) << p.Table();
  int64_t sum = 0;
  for (const Region& r : p.regions()) sum += r.bytes;
  EXPECT_EQ(sum, p.total);
  EXPECT_LE(p.total, p.budget);
}

TEST(ServerMemory, WithoutServeNothingIsCharged) {
  const PlanModel m = Synthetic();
  PlanOptions o = Serving(1, 16, 0, kMiB);
  o.serve.serving = false;
  const MemoryPlan p = MakePlan(m, 4 * kGiB, o);
  EXPECT_EQ(RegionBytes(p, "server", "threads"), -1);
  EXPECT_EQ(RegionBytes(p, "all", "process-overhead"), 5 * kProcessOverheadBytes);
  EXPECT_EQ(p.server.total(), 0);
  // The serve options alone, without --serve, change nothing.
  PlanOptions big = o;
  big.serve.queue_size = 1000;
  big.serve.max_body_bytes = 64 * kMiB;
  EXPECT_EQ(PlanFloor(m, big), PlanFloor(m, o));
}

TEST(ServerMemory, BodiesScaleWithThreadsAndTheBodyLimit) {
  const PlanModel m = Synthetic();
  // Explicit threads: doubling the body limit adds the same per-thread share again.
  const int64_t f1 = PlanFloor(m, Serving(1, 4, 6, kMiB));
  const int64_t f2 = PlanFloor(m, Serving(1, 4, 6, 2 * kMiB));
  const int64_t f3 = PlanFloor(m, Serving(1, 4, 6, 3 * kMiB));
  EXPECT_GT(f2 - f1, 6 * kMiB);  // six bodies of one more MiB each, at least as read
  EXPECT_EQ(f3 - f2, f2 - f1);
  // Twice the threads: the body share doubles (the requests share is capped by the queue).
  const MemoryPlan a = MakePlan(m, 8 * kGiB, Serving(1, 4, 6, kMiB));
  const MemoryPlan b = MakePlan(m, 8 * kGiB, Serving(1, 4, 12, kMiB));
  EXPECT_EQ(b.server.connections, 2 * a.server.connections);
  EXPECT_GT(b.server.thread_bytes, a.server.thread_bytes);
}

TEST(ServerMemory, HeldRequestsAreCappedByTheConnectionThreads) {
  const PlanModel m = Synthetic();
  // 3 connection threads can hold no more than 3 requests, however long the queue.
  const MemoryPlan few = MakePlan(m, 8 * kGiB, Serving(2, 16, 3, kMiB));
  EXPECT_EQ(few.server.held_requests, 3);
  const MemoryPlan longer = MakePlan(m, 8 * kGiB, Serving(2, 1000, 3, kMiB));
  EXPECT_EQ(longer.server.requests, few.server.requests);
  // With enough threads every running and waiting request is held: max_batch + queue.
  const MemoryPlan many = MakePlan(m, 8 * kGiB, Serving(2, 5, 40, kMiB));
  EXPECT_EQ(many.server.held_requests, 7);
  // A longer context costs each held request more.
  PlanOptions ctx = Serving(2, 5, 40, kMiB);
  ctx.context = 8192;
  EXPECT_EQ(MakePlan(m, 8 * kGiB, ctx).server.requests, 2 * many.server.requests);
}

TEST(ServerMemory, TheVocabularySizesTheDecodeCache) {
  PlanModel m = Synthetic();
  const int64_t small = MakePlan(m, 8 * kGiB, Serving(1, 16, 0, kMiB)).server.decode_cache;
  EXPECT_GE(small, 1000 * 8);  // at least a pointer per id of the 1000
  m.cfg.vocab_size *= 4;
  EXPECT_EQ(MakePlan(m, 8 * kGiB, Serving(1, 16, 0, kMiB)).server.decode_cache, 4 * small);
}

TEST(ServerMemory, EveryBudgetFromTheServingFloorFits) {
  const PlanModel m = Synthetic();
  const PlanOptions o = Serving(2, 6, 0, 256 << 10);
  const int64_t floor = PlanFloor(m, o);
  EXPECT_THROW(MakePlan(m, floor - 1, o), Error);
  for (int64_t b = floor; b < floor + 400 * kMiB; b += 9 * kMiB + 4321) {
    const MemoryPlan p = MakePlan(m, b, o);
    int64_t sum = 0, server = 0;
    for (const Region& r : p.regions()) {
      EXPECT_GE(r.bytes, 0) << r.region;
      sum += r.bytes;
      if (r.process == "server") server += r.bytes;
    }
    EXPECT_EQ(sum, p.total);
    EXPECT_LE(p.total, b);
    EXPECT_EQ(server, p.server.total());
    // The six connection threads' bodies at least as read, beside the other processes.
    EXPECT_GE(server, 6 * (256 << 10));
  }
}

TEST(ServerMemory, BadServeOptionsAreUsageErrors) {
  const PlanModel m = Synthetic();
  auto code = [&](const PlanOptions& o) {
    try {
      (void)PlanFloor(m, o);
      return 0;
    } catch (const Error& e) {
      return static_cast<int>(e.code());
    }
  };
  EXPECT_EQ(code(Serving(1, 16, 0, kMiB)), 0);
  EXPECT_EQ(code(Serving(1, 16, 4096, kMiB)), 0);
  EXPECT_EQ(code(Serving(1, 16, 4097, kMiB)), kExitUsage);
  EXPECT_EQ(code(Serving(1, 16, -1, kMiB)), kExitUsage);
  EXPECT_EQ(code(Serving(1, -1, 0, kMiB)), kExitUsage);
  EXPECT_EQ(code(Serving(1, (1 << 20) + 1, 0, kMiB)), kExitUsage);
  EXPECT_EQ(code(Serving(1, 16, 0, 1023)), kExitUsage);
  EXPECT_EQ(code(Serving(1, 16, 0, int64_t{1} << 60)), kExitUsage);  // no overflow: refused
}

}  // namespace
}  // namespace k3::plan
