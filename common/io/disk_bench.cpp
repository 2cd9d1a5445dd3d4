// k3-disk-bench FILE [--backend direct] [--depth N] [--chunk BYTES] [--batch BYTES] [--bytes LIMIT]
// Raw sequential read bandwidth through a BlockReader: the ceiling the trunk reader and the
// expert fetcher can reach on this disk. Prints MB/s (10^6 bytes per second). --batch reads
// the file as consecutive batches of that size, each drained before the next starts, the way
// the services' read worker reads one job (a ring slot's run) after another.
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <string>

#include "common/cli_parse.h"
#include "common/error.h"
#include "common/io/block_reader.h"
#include "common/io/io_internal.h"
#include "common/process_init.h"
#include "common/read_window.h"
#include "common/run_main.h"

int main(int argc, char** argv) {
  k3::InitProcess();  // whole stderr lines, harmless signals (common/process_init.h)
  CLI::App app{"k3-disk-bench: sequential read bandwidth of one file"};
  std::string file, backend = "direct";
  int depth = 8;
  uint64_t chunk = 4u << 20, limit = 0, batch = 0;
  app.add_option("file", file, "file to read")->required();
  app.add_option("--backend", backend, "direct | pread | uring | mmap");
  app.add_option("--depth", depth, "requests in flight (threads for direct/pread)")->check(CLI::Range(1, 1024));
  app.add_option("--chunk", chunk, "bytes per request (a multiple of 4096, the read-window block)");
  app.add_option("--batch", batch, "bytes per batch, each read to the end before the next (0 = depth x chunk)");
  app.add_option("--bytes", limit, "read at most this many bytes (0 = whole file)");
  return k3::RunMain("k3-disk-bench", [&]() -> int {
    if (!k3::ParseCommandLine(app, argc, argv, "k3-disk-bench")) return k3::kExitOk;
    k3::io::ReaderOptions opts;
    opts.threads = depth;
    opts.queue_depth = depth;
    opts.chunk_bytes = chunk;
    auto reader = k3::io::OpenBlockReader(backend, file, opts);
    uint64_t total = reader->file_size();
    if (limit && limit < total) total = limit;
    // One batch (default depth*chunk bytes) at a time, into an aligned buffer so direct reads land in place.
    const uint64_t batch_bytes = batch > 0 ? k3::AlignUp(batch) : chunk * static_cast<uint64_t>(depth);
    auto buf = k3::io::internal::AllocAligned(batch_bytes);
    const auto t0 = std::chrono::steady_clock::now();
    for (uint64_t off = 0; off < total; off += batch_bytes) {
      const uint64_t n = std::min(batch_bytes, total - off);
      reader->Read(off, n, buf.get());
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("%s: %llu bytes via %s, depth %d, chunk %llu, batch %llu: %.3f s, %.1f MB/s\n", file.c_str(),
                static_cast<unsigned long long>(total), reader->backend(), depth,
                static_cast<unsigned long long>(chunk), static_cast<unsigned long long>(batch_bytes), s,
                s > 0 ? total / s / 1e6 : 0.0);
    return k3::kExitOk;
  });
}
