// Every backend must return the bytes that were written, for any range: unaligned offsets
// and lengths, ranges crossing 4096 boundaries, reads ending exactly at EOF, many requests
// in one batch; a range past EOF, a file that shrank and unknown backends are errors.
#include "common/io/block_reader.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>
#include <atomic>
#include <iostream>

#include "common/error.h"

namespace k3::io {
namespace {

// File content is a function of the position, so the expectation never comes from a reader.
uint8_t ByteAt(uint64_t i) { return static_cast<uint8_t>((i * 2654435761u) >> 13 ^ i); }

std::string WriteFile(const std::string& dir, const std::string& tag, uint64_t size) {
  const std::string path = dir + "/k3-io-test-" + std::to_string(::getpid()) + "-" + tag + ".bin";
  std::vector<char> data(size);
  for (uint64_t i = 0; i < size; ++i) data[i] = static_cast<char>(ByteAt(i));
  std::ofstream(path, std::ios::binary).write(data.data(), static_cast<std::streamsize>(size));
  return path;
}

constexpr uint64_t kSize = 3 * (1u << 20) + 12345;  // deliberately not a multiple of 4096

class Backends : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { path_ = WriteFile(K3_TEST_SCRATCH_DIR, GetParam(), kSize); }
  void TearDown() override { std::filesystem::remove(path_); }
  std::unique_ptr<BlockReader> Open(ReaderOptions o = {}) { return OpenBlockReader(GetParam(), path_, o); }
  static void ExpectBytes(const uint8_t* got, uint64_t offset, uint64_t length) {
    for (uint64_t i = 0; i < length; ++i)
      if (got[i] != ByteAt(offset + i)) {
        ADD_FAILURE() << "byte " << offset + i << " differs (range offset " << offset << " length " << length << ")";
        return;
      }
  }
  std::string path_;
};

TEST_P(Backends, RandomRanges) {
  auto r = Open();
  EXPECT_EQ(r->file_size(), kSize);
  EXPECT_EQ(std::string(r->backend()), GetParam());
  std::mt19937_64 rng(42);
  std::vector<uint8_t> buf(kSize + 1);
  for (int i = 0; i < 300; ++i) {
    uint64_t len = 1 + rng() % (i % 3 == 0 ? 70000 : 9000);
    uint64_t off = rng() % (kSize - len + 1);
    uint8_t* dst = buf.data() + (i % 2);  // odd destinations too
    r->Read(off, len, dst);
    ExpectBytes(dst, off, len);
  }
}

TEST_P(Backends, EdgeRanges) {
  auto r = Open();
  std::vector<uint8_t> buf(kSize);
  struct Case { uint64_t off, len; };
  const Case cases[] = {
      {0, 1}, {4095, 2}, {4096, 4096}, {4095, 4098}, {1, 8190},   // around block bounds
      {kSize - 1, 1}, {kSize - 5000, 5000}, {kSize - 4096, 4096},  // ending exactly at EOF
      {0, kSize},                                                   // whole file
      {kSize, 0}, {123, 0},                                         // empty reads
  };
  for (const auto& c : cases) {
    r->Read(c.off, c.len, buf.data());
    ExpectBytes(buf.data(), c.off, c.len);
  }
  // Aligned offset, length and memory: direct reads land in place.
  auto* aligned = static_cast<uint8_t*>(std::aligned_alloc(4096, 1 << 20));
  r->Read(8192, 1 << 20, aligned);
  ExpectBytes(aligned, 8192, 1 << 20);
  std::free(aligned);
}

TEST_P(Backends, ManyRequestsInFlight) {
  ReaderOptions o;
  o.chunk_bytes = 16384;  // many chunks per request, so the queue / pool is kept full
  o.threads = 4;
  o.queue_depth = 8;
  auto r = Open(o);
  std::mt19937_64 rng(7);
  std::vector<std::vector<uint8_t>> bufs(200);
  std::vector<ReadRequest> batch;
  for (auto& b : bufs) {
    uint64_t len = 1 + rng() % 100000;
    uint64_t off = rng() % (kSize - len + 1);
    b.resize(len);
    batch.push_back({off, len, b.data()});
  }
  r->Read(batch);
  for (size_t i = 0; i < batch.size(); ++i) ExpectBytes(bufs[i].data(), batch[i].offset, batch[i].length);
}

TEST_P(Backends, PastEndOfFileIsAnError) {
  auto r = Open();
  std::vector<uint8_t> buf(10000);
  for (auto [off, len] : {std::pair<uint64_t, uint64_t>{kSize - 10, 11}, {kSize, 1}, {kSize + 4096, 10},
                          {~0ull - 5, 10}}) {
    try {
      r->Read(off, len, buf.data());
      ADD_FAILURE() << "read at " << off << " accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), kExitRuntime);
      const std::string msg = e.what();
      EXPECT_NE(msg.find(path_), std::string::npos) << msg;
      EXPECT_NE(msg.find(std::to_string(off)), std::string::npos) << msg;
    }
  }
}

TEST_P(Backends, ShrunkFileIsALoudShortRead) {
  if (GetParam() == "mmap") GTEST_SKIP() << "a shrunk mapped file raises SIGBUS; mmap is for trusted files";
  auto r = Open();
  ASSERT_EQ(::truncate(path_.c_str(), 1 << 20), 0);
  std::vector<uint8_t> buf(5000);
  try {
    r->Read(2 << 20, 5000, buf.data());
    FAIL() << "short read not reported";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), kExitRuntime);
    const std::string msg = e.what();
    EXPECT_NE(msg.find("short read"), std::string::npos) << msg;
    EXPECT_NE(msg.find(path_), std::string::npos) << msg;
  }
}

TEST_P(Backends, ConcurrentCallers) {
  auto r = Open();
  std::vector<std::thread> ts;
  std::atomic<int> bad{0};
  for (int t = 0; t < 4; ++t)
    ts.emplace_back([&, t] {
      std::vector<uint8_t> b(50000);
      for (int i = 0; i < 40; ++i) {
        uint64_t off = static_cast<uint64_t>(t * 700001 + i * 33331) % (kSize - b.size());
        r->Read(off, b.size(), b.data());
        for (size_t k = 0; k < b.size(); ++k)
          if (b[k] != ByteAt(off + k)) { ++bad; break; }
      }
    });
  for (auto& t : ts) t.join();
  EXPECT_EQ(bad.load(), 0);
}

INSTANTIATE_TEST_SUITE_P(All, Backends, ::testing::Values("direct", "pread", "uring", "mmap"));

TEST(BlockReader, TmpfsEveryBackendOrSkip) {
  const std::string path = WriteFile("/dev/shm", "tmpfs", 100000);
  for (const auto& b : BlockReaderBackends()) {
    if (b == "direct" && !DirectIoSupported(path)) {
      std::cout << "[ SKIPPED  ] direct on tmpfs: O_DIRECT not supported by this filesystem\n";
      try {
        OpenBlockReader(b, path);
        ADD_FAILURE() << "direct open on tmpfs should fail";
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("O_DIRECT"), std::string::npos);
      }
      continue;
    }
    auto r = OpenBlockReader(b, path);
    std::vector<uint8_t> buf(99000);
    r->Read(777, buf.size(), buf.data());
    for (size_t i = 0; i < buf.size(); ++i)
      if (buf[i] != ByteAt(777 + i)) { ADD_FAILURE() << b << " differs at " << 777 + i; break; }
  }
  std::filesystem::remove(path);
}

TEST(BlockReader, UnknownBackendIsUsageError) {
  try {
    OpenBlockReader("aio", "/etc/hostname");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), kExitUsage);
    EXPECT_NE(std::string(e.what()).find("aio"), std::string::npos);
  }
  ReaderOptions bad;
  bad.chunk_bytes = 1000;
  EXPECT_THROW(OpenBlockReader("pread", "/etc/hostname", bad), Error);
}

TEST(BlockReader, MissingFileIsRuntimeError) {
  for (const auto& b : BlockReaderBackends()) {
    try {
      OpenBlockReader(b, "/nonexistent/k3/shard.safetensors");
      ADD_FAILURE() << b;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), kExitRuntime) << b;
      EXPECT_NE(std::string(e.what()).find("/nonexistent/k3/shard.safetensors"), std::string::npos);
    }
  }
}

}  // namespace
}  // namespace k3::io
