// Helpers shared by the BlockReader backends (not part of the public interface).
#pragma once
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/io/block_reader.h"
#include "common/read_window.h"

namespace k3::io::internal {

// O_DIRECT's alignment of offset, length and memory, and the rounding to it, are the read
// window's (common/read_window.h): k3::kReadAlign, k3::AlignDown, k3::AlignUp.

// One piece of a request, at most chunk_bytes long.
struct Chunk {
  uint64_t offset = 0;
  uint64_t length = 0;
  uint8_t* dst = nullptr;
};
std::vector<Chunk> SplitBatch(std::span<const ReadRequest> batch, uint64_t chunk_bytes);

// For O_DIRECT: the aligned window [begin, begin+span) covering a chunk, and whether the
// chunk can be read straight into its destination (offset, length and memory all aligned).
struct Window {
  uint64_t begin = 0;
  uint64_t span = 0;    // bytes to ask for (multiple of 4096)
  uint64_t need = 0;    // bytes that must arrive (up to the chunk's end; less than span at EOF)
  bool in_place = false;
};
Window DirectWindow(const Chunk& c);

// 4096-aligned heap buffer.
struct AlignedFree {
  void operator()(uint8_t* p) const { std::free(p); }
};
using AlignedBuffer = std::unique_ptr<uint8_t, AlignedFree>;
AlignedBuffer AllocAligned(uint64_t bytes);

// pread until at least `need` bytes of [offset, offset+cap) have arrived. EINTR is retried;
// zero-byte reads are retried max_retries times; then k3::Error(kExitRuntime) naming path+offset.
void PreadAtLeast(int fd, uint8_t* buf, uint64_t cap, uint64_t need, uint64_t offset, const std::string& path,
                  int max_retries);

[[noreturn]] void ThrowShortRead(const std::string& path, uint64_t offset, uint64_t got, uint64_t need);
[[noreturn]] void ThrowIoError(const std::string& path, uint64_t offset, int err);

// Size of the open file `fd`; on failure closes `fd` and throws k3::Error(kExitRuntime)
// naming `path`.
uint64_t FileSizeOrClose(int fd, const std::string& path);

// Backend constructors (opened file, options).
std::unique_ptr<BlockReader> MakePosixReader(const std::string& path, bool direct, const ReaderOptions& o);
std::unique_ptr<BlockReader> MakeUringReader(const std::string& path, const ReaderOptions& o);
std::unique_ptr<BlockReader> MakeMmapReader(const std::string& path, const ReaderOptions& o);

}  // namespace k3::io::internal
