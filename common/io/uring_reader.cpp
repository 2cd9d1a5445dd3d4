// "uring" backend: one io_uring with up to queue_depth reads in flight. Opens the file with
// O_DIRECT when the filesystem allows it (aligned windows through per-slot bounce buffers,
// like "direct"), else buffered. Calls to Read() are serialised: the ring has one owner.
#include <fcntl.h>
#include <liburing.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <mutex>

#include "common/error.h"
#include "common/io/io_internal.h"

namespace k3::io::internal {
namespace {

class UringReader final : public BlockReader {
 public:
  UringReader(std::string path, uint64_t size, int fd, bool direct, const ReaderOptions& o)
      : BlockReader(std::move(path), size), fd_(fd), direct_(direct), opts_(o) {
    int rc = io_uring_queue_init(static_cast<unsigned>(o.queue_depth), &ring_, 0);
    if (rc < 0) {
      ::close(fd_);
      throw RuntimeFailure(this->path() + ": io_uring setup failed: " + std::strerror(-rc));
    }
    slots_.resize(static_cast<size_t>(o.queue_depth));
  }
  ~UringReader() override {
    io_uring_queue_exit(&ring_);
    ::close(fd_);
  }
  const char* backend() const override { return "uring"; }

  void Read(std::span<const ReadRequest> batch) override {
    CheckBatch(batch);
    std::lock_guard lock(mu_);
    const std::vector<Chunk> chunks = SplitBatch(batch, opts_.chunk_bytes);
    size_t next = 0, inflight = 0;
    std::string error;  // first failure; in-flight reads are drained before throwing
    std::vector<size_t> free_slots;
    for (size_t s = 0; s < slots_.size(); ++s) free_slots.push_back(slots_.size() - 1 - s);

    while ((next < chunks.size() && error.empty()) || inflight > 0) {
      while (error.empty() && next < chunks.size() && !free_slots.empty()) {
        Slot& s = slots_[free_slots.back()];
        s.chunk = chunks[next++];
        s.got = 0;
        s.zero_reads = 0;
        if (direct_) {
          const Window w = DirectWindow(s.chunk);
          s.begin = w.begin;
          s.span = w.span;
          s.need = w.need;
          if (w.in_place) {
            s.buf = s.chunk.dst;
          } else {
            if (!s.bounce) s.bounce = AllocAligned(opts_.chunk_bytes + 2 * kReadAlign);
            s.buf = s.bounce.get();
          }
        } else {
          s.begin = s.chunk.offset;
          s.span = s.need = s.chunk.length;
          s.buf = s.chunk.dst;
        }
        Submit(free_slots.back());
        free_slots.pop_back();
        ++inflight;
      }
      io_uring_submit_and_wait(&ring_, 1);
      io_uring_cqe* cqe = nullptr;
      while (io_uring_peek_cqe(&ring_, &cqe) == 0) {
        const size_t id = static_cast<size_t>(io_uring_cqe_get_data64(cqe));
        const int res = cqe->res;
        io_uring_cqe_seen(&ring_, cqe);
        Slot& s = slots_[id];
        bool resubmit = false;
        if (res == -EINTR || res == -EAGAIN) {
          resubmit = true;
        } else if (res < 0) {
          if (error.empty()) error = IoErrorText(s.begin + s.got, -res);
        } else if (res == 0) {
          if (++s.zero_reads > opts_.max_retries) {
            if (error.empty()) error = ShortReadText(s);
          } else {
            resubmit = true;
          }
        } else {
          s.got += static_cast<uint64_t>(res);
          resubmit = s.got < s.need;
        }
        if (resubmit && error.empty()) {
          Submit(id);  // the rest of a short read, or a retry
          continue;
        }
        if (error.empty() && s.buf != s.chunk.dst)
          std::memcpy(s.chunk.dst, s.buf + (s.chunk.offset - s.begin), s.chunk.length);
        free_slots.push_back(id);
        --inflight;
      }
    }
    if (!error.empty()) throw RuntimeFailure(error);
  }

 private:
  struct Slot {
    Chunk chunk;
    uint64_t begin = 0, span = 0, need = 0, got = 0;
    int zero_reads = 0;
    uint8_t* buf = nullptr;
    AlignedBuffer bounce;
  };

  void Submit(size_t id) {
    Slot& s = slots_[id];
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    if (!sqe) {  // the queue is sized to the slots, so this only happens after a partial submit
      io_uring_submit(&ring_);
      sqe = io_uring_get_sqe(&ring_);
    }
    io_uring_prep_read(sqe, fd_, s.buf + s.got, static_cast<unsigned>(s.span - s.got), s.begin + s.got);
    io_uring_sqe_set_data64(sqe, id);
  }

  std::string IoErrorText(uint64_t offset, int err) const {
    return path() + ": read at offset " + std::to_string(offset) + " failed: " + std::strerror(err);
  }
  std::string ShortReadText(const Slot& s) const {
    return path() + ": short read at offset " + std::to_string(s.begin) + ": got " + std::to_string(s.got) + " of " +
           std::to_string(s.need) + " bytes after retries (file truncated?)";
  }

  int fd_;
  bool direct_;
  ReaderOptions opts_;
  io_uring ring_{};
  std::vector<Slot> slots_;
  std::mutex mu_;
};

}  // namespace

std::unique_ptr<BlockReader> MakeUringReader(const std::string& path, const ReaderOptions& o) {
  if (o.chunk_bytes > (1u << 30)) throw UsageError("uring chunk size must be at most 1 GiB");
  bool direct = true;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT);
  if (fd < 0 && errno == EINVAL) {  // e.g. tmpfs: fall back to the page cache
    direct = false;
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  }
  if (fd < 0) throw RuntimeFailure(path + ": cannot open: " + std::strerror(errno));
  const uint64_t size = FileSizeOrClose(fd, path);
  return std::make_unique<UringReader>(path, size, fd, direct, o);
}

}  // namespace k3::io::internal
