#include "common/io/block_reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/error.h"
#include "common/io/io_internal.h"

namespace k3::io {

void BlockReader::CheckBatch(std::span<const ReadRequest> batch) const {
  for (const auto& r : batch) {
    // Written so that offset + length cannot overflow.
    if (r.offset > size_ || r.length > size_ - r.offset)
      throw RuntimeFailure(path_ + ": read of " + std::to_string(r.length) + " bytes at offset " +
                           std::to_string(r.offset) + " is past the end of the file (" + std::to_string(size_) +
                           " bytes)");
    if (r.length && !r.dst) throw RuntimeFailure(path_ + ": read at offset " + std::to_string(r.offset) + " has no destination");
  }
}

const std::vector<std::string>& BlockReaderBackends() {
  static const std::vector<std::string> names{"direct", "pread", "uring", "mmap"};
  return names;
}

std::unique_ptr<BlockReader> OpenBlockReader(std::string_view backend, const std::string& path,
                                             const ReaderOptions& opts) {
  if (opts.threads < 1 || opts.queue_depth < 1 || opts.chunk_bytes < kReadAlign ||
      opts.chunk_bytes % kReadAlign || opts.max_retries < 0)
    throw UsageError("I/O options: threads and queue depth must be >= 1, chunk a multiple of 4096");
  if (backend == "direct") return internal::MakePosixReader(path, true, opts);
  if (backend == "pread") return internal::MakePosixReader(path, false, opts);
  if (backend == "uring") return internal::MakeUringReader(path, opts);
  if (backend == "mmap") return internal::MakeMmapReader(path, opts);
  throw UsageError("unknown I/O backend '" + std::string(backend) + "' (expected direct, pread, uring or mmap)");
}

bool DirectIoSupported(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC);
  if (fd < 0) return false;
  ::close(fd);
  return true;
}

namespace internal {

std::vector<Chunk> SplitBatch(std::span<const ReadRequest> batch, uint64_t chunk_bytes) {
  std::vector<Chunk> out;
  for (const auto& r : batch) {
    for (uint64_t done = 0; done < r.length; done += chunk_bytes)
      out.push_back({r.offset + done, std::min(chunk_bytes, r.length - done), r.dst + done});
  }
  return out;
}

Window DirectWindow(const Chunk& c) {
  Window w;
  w.begin = AlignDown(c.offset);
  w.span = AlignUp(c.offset + c.length) - w.begin;
  w.need = c.offset + c.length - w.begin;
  w.in_place = c.offset % kReadAlign == 0 && c.length % kReadAlign == 0 &&
               reinterpret_cast<uintptr_t>(c.dst) % kReadAlign == 0;
  return w;
}

uint64_t FileSizeOrClose(int fd, const std::string& path) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    throw RuntimeFailure(path + ": cannot stat: " + std::strerror(err));
  }
  return static_cast<uint64_t>(st.st_size);
}

AlignedBuffer AllocAligned(uint64_t bytes) {
  void* p = std::aligned_alloc(kReadAlign, AlignUp(std::max<uint64_t>(bytes, 1)));
  if (!p) throw RuntimeFailure("out of memory allocating a " + std::to_string(bytes) + "-byte I/O buffer");
  return AlignedBuffer(static_cast<uint8_t*>(p));
}

void ThrowShortRead(const std::string& path, uint64_t offset, uint64_t got, uint64_t need) {
  throw RuntimeFailure(path + ": short read at offset " + std::to_string(offset) + ": got " + std::to_string(got) +
                       " of " + std::to_string(need) + " bytes after retries (file truncated?)");
}

void ThrowIoError(const std::string& path, uint64_t offset, int err) {
  throw RuntimeFailure(path + ": read at offset " + std::to_string(offset) + " failed: " + std::strerror(err));
}

void PreadAtLeast(int fd, uint8_t* buf, uint64_t cap, uint64_t need, uint64_t offset, const std::string& path,
                  int max_retries) {
  uint64_t got = 0;
  int zero_reads = 0;
  while (got < need) {
    ssize_t n = ::pread(fd, buf + got, cap - got, static_cast<off_t>(offset + got));
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      ThrowIoError(path, offset + got, errno);
    }
    if (n == 0) {
      if (++zero_reads > max_retries) ThrowShortRead(path, offset, got, need);
      continue;
    }
    got += static_cast<uint64_t>(n);
  }
}

}  // namespace internal
}  // namespace k3::io
