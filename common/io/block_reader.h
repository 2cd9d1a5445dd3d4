// BlockReader: the one interface every weight reader goes through. A backend reads batches
// of byte ranges from one immutable file into caller memory, with several requests in flight,
// and every backend returns byte-identical data:
//   direct  O_DIRECT pread (no page cache), ranges widened to 4096 bounds through per-thread
//           bounce buffers; aligned ranges into aligned memory are read in place. Thread pool.
//   pread   buffered pread, same thread pool.
//   uring   io_uring with a deep queue (O_DIRECT when the filesystem allows it).
//   mmap    the file mapped read-only; reads are memcpy.
// Short reads are retried; a range that cannot be read completely (past EOF, I/O error,
// file shrunk) is a k3::Error(kExitRuntime) naming the file and offset.
//
// Thread-safety: Read() may be called from several threads at once on every backend.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace k3::io {

struct ReadRequest {
  uint64_t offset = 0;    // byte offset in the file (any alignment)
  uint64_t length = 0;    // bytes to read (any length; 0 is a no-op)
  uint8_t* dst = nullptr; // where the bytes go (any alignment)
};

struct ReaderOptions {
  int threads = 4;                   // direct/pread: worker threads per batch
  int queue_depth = 32;              // uring: requests in flight
  uint64_t chunk_bytes = 1u << 20;   // large requests are split into chunks of this size
  int max_retries = 3;               // zero-byte (short) reads tolerated per chunk
};

class BlockReader {
 public:
  virtual ~BlockReader() = default;
  BlockReader(const BlockReader&) = delete;
  BlockReader& operator=(const BlockReader&) = delete;

  // Reads every request completely. Throws k3::Error(kExitRuntime) naming file and offset.
  virtual void Read(std::span<const ReadRequest> batch) = 0;
  void Read(uint64_t offset, uint64_t length, uint8_t* dst) {
    const ReadRequest r{offset, length, dst};
    Read(std::span<const ReadRequest>(&r, 1));
  }
  virtual const char* backend() const = 0;
  const std::string& path() const { return path_; }
  uint64_t file_size() const { return size_; }

 protected:
  BlockReader(std::string path, uint64_t size) : path_(std::move(path)), size_(size) {}
  // Every request inside the file? Throws the past-EOF error otherwise.
  void CheckBatch(std::span<const ReadRequest> batch) const;

 private:
  std::string path_;
  uint64_t size_;
};

// "direct" | "pread" | "uring" | "mmap"; anything else is k3::Error(kExitUsage).
// A file that cannot be opened is k3::Error(kExitRuntime).
std::unique_ptr<BlockReader> OpenBlockReader(std::string_view backend, const std::string& path,
                                             const ReaderOptions& opts = {});
const std::vector<std::string>& BlockReaderBackends();
// False when the filesystem holding `path` refuses O_DIRECT (e.g. tmpfs).
bool DirectIoSupported(const std::string& path);

}  // namespace k3::io
