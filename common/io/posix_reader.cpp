// "direct" and "pread" backends: a batch is split into chunks that a few threads claim
// from an atomic counter, so several requests are in flight at once.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <exception>
#include <mutex>
#include <thread>

#include "common/error.h"
#include "common/io/io_internal.h"

namespace k3::io::internal {
namespace {

class PosixReader final : public BlockReader {
 public:
  PosixReader(std::string path, uint64_t size, int fd, bool direct, const ReaderOptions& o)
      : BlockReader(std::move(path), size), fd_(fd), direct_(direct), opts_(o) {}
  ~PosixReader() override { ::close(fd_); }

  const char* backend() const override { return direct_ ? "direct" : "pread"; }

  void Read(std::span<const ReadRequest> batch) override {
    CheckBatch(batch);
    const std::vector<Chunk> chunks = SplitBatch(batch, opts_.chunk_bytes);
    const size_t workers = std::min<size_t>(static_cast<size_t>(opts_.threads), chunks.size());
    if (workers <= 1) {
      Worker(chunks);
      return;
    }
    std::vector<std::thread> pool;
    pool.reserve(workers);
    std::atomic<size_t> next{0};
    std::mutex err_mu;
    std::exception_ptr first_error;
    for (size_t w = 0; w < workers; ++w) {
      pool.emplace_back([&] {
        try {
          Worker(chunks, &next);
        } catch (...) {
          std::lock_guard lock(err_mu);
          if (!first_error) first_error = std::current_exception();
          next.store(chunks.size());  // the others stop claiming work
        }
      });
    }
    for (auto& t : pool) t.join();
    if (first_error) std::rethrow_exception(first_error);
  }

 private:
  // Reads chunks claimed from `next` (or all of them, in order, when next is null).
  void Worker(const std::vector<Chunk>& chunks, std::atomic<size_t>* next = nullptr) {
    AlignedBuffer bounce;
    for (size_t i = next ? next->fetch_add(1) : 0; i < chunks.size(); i = next ? next->fetch_add(1) : i + 1) {
      const Chunk& c = chunks[i];
      if (!direct_) {
        PreadAtLeast(fd_, c.dst, c.length, c.length, c.offset, path(), opts_.max_retries);
        continue;
      }
      const Window w = DirectWindow(c);
      if (w.in_place) {
        PreadAtLeast(fd_, c.dst, w.span, w.need, w.begin, path(), opts_.max_retries);
        continue;
      }
      if (!bounce) bounce = AllocAligned(opts_.chunk_bytes + 2 * kReadAlign);
      PreadAtLeast(fd_, bounce.get(), w.span, w.need, w.begin, path(), opts_.max_retries);
      std::memcpy(c.dst, bounce.get() + (c.offset - w.begin), c.length);
    }
  }

  int fd_;
  bool direct_;
  ReaderOptions opts_;
};

}  // namespace

std::unique_ptr<BlockReader> MakePosixReader(const std::string& path, bool direct, const ReaderOptions& o) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | (direct ? O_DIRECT : 0));
  if (fd < 0) {
    const int err = errno;
    if (direct && err == EINVAL)
      throw RuntimeFailure(path + ": the filesystem does not support O_DIRECT (use --io pread or uring)");
    throw RuntimeFailure(path + ": cannot open: " + std::strerror(err));
  }
  const uint64_t size = FileSizeOrClose(fd, path);
  return std::make_unique<PosixReader>(path, size, fd, direct, o);
}

}  // namespace k3::io::internal
