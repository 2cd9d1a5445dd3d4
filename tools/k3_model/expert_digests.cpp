#include "tools/k3_model/expert_digests.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <thread>

#include "common/error.h"
#include "common/tensor_names.h"

namespace k3::model_tool {

namespace {

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) close(fd);
  }
};

void ReadExactly(int fd, uint8_t* dst, uint64_t length, uint64_t offset, const std::string& path) {
  while (length > 0) {
    const ssize_t n = pread(fd, dst, length, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      throw RuntimeFailure(path + ": read failed at byte " + std::to_string(offset) +
                           (n < 0 ? std::string(": ") + std::strerror(errno) : std::string(": end of file")));
    dst += n;
    offset += static_cast<uint64_t>(n);
    length -= static_cast<uint64_t>(n);
  }
}

}  // namespace

int DefaultThreads() { return static_cast<int>(std::max(1u, std::thread::hardware_concurrency())); }

std::vector<ExpertDigest> DigestExperts(const Checkpoint& ck, const ModelConfig& cfg, int threads,
                                        const std::string& what) {
  struct Item {
    size_t index;
    ByteRange range;
  };
  std::vector<Item> items;
  for (int64_t l = cfg.first_k_dense_replace; l < cfg.num_layers; ++l)
    for (int64_t e = 0; e < cfg.num_experts; ++e)
      items.push_back({items.size(), ExpertRange(ck, static_cast<int>(l), static_cast<int>(e))});
  // File order: each shard is read front to back (threads take neighbouring experts).
  std::sort(items.begin(), items.end(), [](const Item& a, const Item& b) {
    return std::pair(a.range.shard, a.range.begin) < std::pair(b.range.shard, b.range.begin);
  });
  std::vector<Fd> fds(ck.shard_paths().size());
  for (size_t i = 0; i < fds.size(); ++i) {
    fds[i].fd = open(ck.shard_paths()[i].c_str(), O_RDONLY | O_CLOEXEC);
    if (fds[i].fd < 0) throw RuntimeFailure(ck.shard_paths()[i] + ": " + std::strerror(errno));
  }

  std::vector<ExpertDigest> out(items.size());
  std::atomic<size_t> next{0}, finished{0};
  std::atomic<uint64_t> bytes{0};
  std::atomic<bool> failed{false};
  std::mutex err_mu;
  std::string error;
  const auto t0 = std::chrono::steady_clock::now();
  auto work = [&] {
    std::vector<uint8_t> buf;
    try {
      for (size_t i; (i = next.fetch_add(1)) < items.size();) {
        const Item& it = items[i];
        const auto len = static_cast<uint64_t>(it.range.end - it.range.begin);
        buf.resize(len);
        ReadExactly(fds[static_cast<size_t>(it.range.shard)].fd, buf.data(), len, static_cast<uint64_t>(it.range.begin),
                    ck.shard_paths()[static_cast<size_t>(it.range.shard)]);
        out[it.index] = ExpertDigestOf(buf.data(), len);
        bytes += len;
        ++finished;
      }
    } catch (const std::exception& e) {
      std::lock_guard<std::mutex> lk(err_mu);
      if (error.empty()) error = e.what();
      next = items.size();  // the others stop too
      failed = true;
    }
  };
  std::vector<std::thread> pool;
  for (int t = 0; t < std::max(1, threads); ++t) pool.emplace_back(work);
  // Progress every 5% (and the end), from this thread while the pool works.
  size_t shown = 0;
  while (!failed && finished < items.size()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    const size_t f = finished;
    if (f * 20 / items.size() > shown && f < items.size()) {
      shown = f * 20 / items.size();
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::fprintf(stderr, "[k3-model] %s: %zu%% (%zu of %zu experts, %.0f MB/s)\n", what.c_str(), f * 100 / items.size(),
                   f, items.size(), s > 0 ? static_cast<double>(bytes) / s / 1e6 : 0.0);
    }
  }
  for (auto& t : pool) t.join();
  if (!error.empty()) throw RuntimeFailure(error);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::fprintf(stderr, "[k3-model] %s: %zu experts, %.1f MB in %.2f s (%.0f MB/s, %d threads)\n", what.c_str(),
               items.size(), static_cast<double>(bytes) / 1e6, s, s > 0 ? static_cast<double>(bytes) / s / 1e6 : 0.0,
               std::max(1, threads));
  return out;
}

Manifest MakeManifest(const Checkpoint& ck, const ModelConfig& cfg, std::vector<ExpertDigest> digests,
                      bool trunk_only) {
  Manifest m;
  m.trunk_only = trunk_only;
  m.first_layer = cfg.first_k_dense_replace;
  m.num_layers = cfg.num_layers;
  m.num_experts = cfg.num_experts;
  for (const std::string& p : ck.shard_paths()) {
    struct stat st{};
    if (stat(p.c_str(), &st) != 0) throw RuntimeFailure(p + ": " + std::strerror(errno));
    m.shards.push_back({std::filesystem::path(p).filename().string(), static_cast<uint64_t>(st.st_size)});
  }
  m.digests = std::move(digests);
  return m;
}

}  // namespace k3::model_tool
