#include "launcher/disk_probe.h"

#include <algorithm>
#include <exception>
#include <memory>
#include <chrono>
#include <filesystem>
#include <thread>
#include <vector>

#include "common/error.h"
#include "common/io/block_reader.h"
#include "common/io/io_internal.h"

namespace k3::launch {

DiskProbe ProbeDiskRate(const std::string& model_dir) {
  namespace fs = std::filesystem;
  std::vector<std::pair<uint64_t, std::string>> shards;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(model_dir, ec))
    if (e.is_regular_file(ec) && e.path().extension() == ".safetensors") shards.push_back({e.file_size(ec), e.path().string()});
  if (shards.empty()) throw RuntimeFailure("--disk-rate probe: no .safetensors shards in " + model_dir + "; give a rate (3.2GB/s)");
  std::sort(shards.rbegin(), shards.rend());
  shards.resize(std::min<size_t>(shards.size(), 4));  // the largest: expert shards, where prompts spend their reads
  if (!io::DirectIoSupported(shards[0].second))
    throw RuntimeFailure("--disk-rate probe: the filesystem of " + shards[0].second + " refuses O_DIRECT; give a rate (3.2GB/s)");
  constexpr uint64_t kBlock = 4u << 20;
  const uint64_t per_file = std::max<uint64_t>(kBlock, kProbeBytes / shards.size() / kBlock * kBlock);
  DiskProbe out;
  std::vector<std::unique_ptr<io::BlockReader>> readers;
  std::vector<uint64_t> start, length;
  io::ReaderOptions ro;
  ro.threads = 4;
  ro.chunk_bytes = kBlock;
  for (const auto& [size, path] : shards) {
    const uint64_t n = std::min<uint64_t>(per_file, size / 4096 * 4096);
    if (n == 0) continue;
    readers.push_back(io::OpenBlockReader("direct", path, ro));
    start.push_back((size - n) / 2 / 4096 * 4096);  // the middle: past any header, within the file
    length.push_back(n);
  }
  // One thread per file, each a few blocks in flight, as the fetcher reads several experts at once.
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  std::vector<std::exception_ptr> failed(readers.size());
  for (size_t i = 0; i < readers.size(); ++i)
    threads.emplace_back([&, i] {
      try {
        auto buf = io::internal::AllocAligned(4 * kBlock);
        for (uint64_t off = 0; off < length[i]; off += 4 * kBlock)
          readers[i]->Read(start[i] + off, std::min<uint64_t>(4 * kBlock, length[i] - off), buf.get());
      } catch (...) {
        failed[i] = std::current_exception();
      }
    });
  for (std::thread& t : threads) t.join();
  for (const std::exception_ptr& e : failed)
    if (e) std::rethrow_exception(e);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (uint64_t n : length) out.bytes += static_cast<int64_t>(n);
  out.files = static_cast<int>(readers.size());
  out.bytes_per_second = s > 0 ? static_cast<double>(out.bytes) / s : 0;
  return out;
}

}  // namespace k3::launch
