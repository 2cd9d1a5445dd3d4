// "mmap" backend: the file is mapped read-only once; a read is a memcpy out of the mapping.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/error.h"
#include "common/io/io_internal.h"

namespace k3::io::internal {
namespace {

class MmapReader final : public BlockReader {
 public:
  MmapReader(std::string path, uint64_t size, const uint8_t* base)
      : BlockReader(std::move(path), size), base_(base) {}
  ~MmapReader() override {
    if (base_) ::munmap(const_cast<uint8_t*>(base_), file_size());
  }
  const char* backend() const override { return "mmap"; }

  void Read(std::span<const ReadRequest> batch) override {
    CheckBatch(batch);
    for (const auto& r : batch)
      if (r.length) std::memcpy(r.dst, base_ + r.offset, r.length);
  }

 private:
  const uint8_t* base_;  // null for an empty file
};

}  // namespace

std::unique_ptr<BlockReader> MakeMmapReader(const std::string& path, const ReaderOptions&) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw RuntimeFailure(path + ": cannot open: " + std::strerror(errno));
  const uint64_t size = FileSizeOrClose(fd, path);
  const uint8_t* base = nullptr;
  if (size > 0) {
    void* p = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      throw RuntimeFailure(path + ": cannot mmap: " + std::strerror(err));
    }
    base = static_cast<const uint8_t*>(p);
  }
  ::close(fd);  // the mapping keeps the file alive
  return std::make_unique<MmapReader>(path, size, base);
}

}  // namespace k3::io::internal
