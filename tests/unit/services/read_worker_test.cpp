// ReadWorker on a real file: bytes and per-job completions in submission order for every
// backend, a failed job reported in its place without stopping later ones, and the next job's
// chunks started while the previous job's last chunks are still in flight (no drain at a job
// boundary).
#include "common/service/read_worker.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <algorithm>
#include <string>
#include <thread>
#include <vector>

namespace k3::svc {
namespace {

// File content is a function of the position, so the expectation never comes from a reader.
uint8_t ByteAt(uint64_t i) { return static_cast<uint8_t>((i * 2654435761u) >> 13 ^ i); }

constexpr uint64_t kMiB = 1u << 20;
constexpr uint64_t kSize = 40 * kMiB + 777;  // not a multiple of 4096

class ReadWorkerTest : public ::testing::TestWithParam<std::string> {
 protected:
  static void SetUpTestSuite() {
    path_ = std::string(K3_SVC_SCRATCH) + "/k3-read-worker-test-" + std::to_string(::getpid()) + ".bin";
    std::vector<char> data(kSize);
    for (uint64_t i = 0; i < kSize; ++i) data[i] = static_cast<char>(ByteAt(i));
    std::ofstream(path_, std::ios::binary).write(data.data(), static_cast<std::streamsize>(kSize));
  }
  static void TearDownTestSuite() { std::filesystem::remove(path_); }

  // Waits for `n` completions (10 s at most).
  static std::vector<ReadDone> WaitFor(ReadWorker& w, size_t n) {
    std::vector<ReadDone> out;
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (out.size() < n && std::chrono::steady_clock::now() < end) {
      zmq::pollitem_t item{w.notifier().handle(), 0, ZMQ_POLLIN, 0};
      zmq::poll(&item, 1, std::chrono::milliseconds(100));
      for (auto& d : w.TakeCompleted()) out.push_back(std::move(d));
    }
    return out;
  }
  static bool Same(const uint8_t* got, uint64_t offset, uint64_t length) {
    for (uint64_t i = 0; i < length; ++i)
      if (got[i] != ByteAt(offset + i)) return false;
    return true;
  }
  static std::string path_;
  zmq::context_t ctx_;
};
std::string ReadWorkerTest::path_;

TEST_P(ReadWorkerTest, BytesAndCompletionsInSubmissionOrder) {
  ReadWorker w(ctx_, "rw-order", GetParam(), {path_}, 4);
  // A long job first, then short ones, then several requests in one job, unaligned.
  struct Range { uint64_t offset, length; };
  const std::vector<std::vector<Range>> jobs = {
      {{0, 9 * kMiB + 5}}, {{123, 4000}}, {{kSize - 3000, 3000}}, {{4096, kMiB}, {20 * kMiB + 1, 2 * kMiB + 17}},
      {{7, 1}}, {{10 * kMiB, 3 * kMiB}}};
  std::vector<std::vector<std::vector<uint8_t>>> bufs(jobs.size());
  for (size_t j = 0; j < jobs.size(); ++j) {
    ReadJob job{100 + j, 0, {}};
    for (const auto& r : jobs[j]) {
      bufs[j].emplace_back(r.length + 1);
      job.requests.push_back({r.offset, r.length, bufs[j].back().data() + 1});  // odd destinations
    }
    w.Submit(std::move(job));
  }
  const auto done = WaitFor(w, jobs.size());
  ASSERT_EQ(done.size(), jobs.size());
  for (size_t j = 0; j < jobs.size(); ++j) {
    EXPECT_EQ(done[j].tag, 100 + j) << "completion " << j << " out of order";
    EXPECT_TRUE(done[j].error.empty()) << done[j].error;
    uint64_t bytes = 0;
    for (size_t r = 0; r < jobs[j].size(); ++r) {
      bytes += jobs[j][r].length;
      EXPECT_TRUE(Same(bufs[j][r].data() + 1, jobs[j][r].offset, jobs[j][r].length)) << "job " << j << " range " << r;
    }
    EXPECT_EQ(done[j].bytes, bytes);
  }
  EXPECT_EQ(w.pending(), 0u);
}

TEST_P(ReadWorkerTest, FailedJobReportedInPlaceLaterJobsRead) {
  ReadWorker w(ctx_, "rw-fail", GetParam(), {path_}, 4);
  std::vector<uint8_t> a(2 * kMiB), b(3 * kMiB), c(kMiB);
  w.Submit({1, 0, {{0, a.size(), a.data()}}});
  w.Submit({2, 0, {{kSize - kMiB, 3 * kMiB, b.data()}}});  // past the end of the file
  w.Submit({3, 0, {{5 * kMiB, c.size(), c.data()}}});
  w.Submit({4, 7, {{0, 10, c.data()}}});  // no such shard
  const auto done = WaitFor(w, 4);
  ASSERT_EQ(done.size(), 4u);
  EXPECT_EQ(done[0].tag, 1u);
  EXPECT_TRUE(done[0].error.empty());
  EXPECT_EQ(done[1].tag, 2u);
  EXPECT_NE(done[1].error.find("offset"), std::string::npos) << done[1].error;
  EXPECT_EQ(done[1].bytes, 0u);
  EXPECT_EQ(done[2].tag, 3u);
  EXPECT_TRUE(done[2].error.empty()) << done[2].error;
  EXPECT_TRUE(Same(c.data(), 5 * kMiB, c.size()));
  EXPECT_EQ(done[3].tag, 4u);
  EXPECT_NE(done[3].error.find("shard 7"), std::string::npos) << done[3].error;
}

// The read-rate property: with 4 reads in flight, a long job's tail must not empty the
// queue while the next job waits. A runner freed after the long job's last chunk was claimed
// takes the next job's first chunk while the others still read the long job's last ones.
// Whether a given run shows the overlap depends on how the runners are scheduled (on a loaded
// machine with fast page-cache reads one runner may finish before another wakes), so the pair
// is run up to 20 times and must overlap at least once; a worker that drains the queue at each
// job boundary can never overlap, so it fails all 20.
TEST_P(ReadWorkerTest, NextJobStartsWhileLastChunksInFlight) {
  int overlapped = 0;
  for (int attempt = 0; attempt < 20 && overlapped < 2; ++attempt) {
    ReadWorker w(ctx_, "rw-overlap-" + std::to_string(attempt), GetParam(), {path_}, 4);
    std::vector<uint8_t> a(32 * kMiB), b(8 * kMiB);
    w.Submit({1, 0, {{0, a.size(), a.data()}}});
    w.Submit({2, 0, {{a.size(), b.size(), b.data()}}});
    const auto done = WaitFor(w, 2);
    ASSERT_EQ(done.size(), 2u);
    EXPECT_EQ(done[0].tag, 1u);
    EXPECT_EQ(done[1].tag, 2u);
    EXPECT_TRUE(Same(a.data(), 0, a.size()));
    EXPECT_TRUE(Same(b.data(), a.size(), b.size()));
    overlapped = std::max(overlapped, w.max_jobs_in_flight());
  }
  EXPECT_GE(overlapped, 2) << "the queue drained at the job boundary in every attempt";
}

INSTANTIATE_TEST_SUITE_P(Backends, ReadWorkerTest, ::testing::Values("direct", "pread", "uring", "mmap"),
                         [](const auto& p) { return std::string(p.param); });

}  // namespace
}  // namespace k3::svc
