#include "common/ipc/shm_arena.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>
#include <vector>

#include "common/error.h"

namespace k3::ipc {
namespace {

Error ShmError(const std::string& what, const std::string& name, int err) {
  return RuntimeFailure("shm " + name + ": " + what + ": " + std::strerror(err));
}

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() { if (fd_ >= 0) ::close(fd_); }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

uint8_t* MapFd(int fd, size_t bytes, bool writable, bool populate, const std::string& name) {
  if (bytes == 0) return nullptr;
  int flags = MAP_SHARED | (populate ? MAP_POPULATE : 0);
  void* p = ::mmap(nullptr, bytes, writable ? PROT_READ | PROT_WRITE : PROT_READ, flags, fd, 0);
  if (p == MAP_FAILED) throw ShmError("mmap " + std::to_string(bytes) + " bytes", name, errno);
  return static_cast<uint8_t*>(p);
}

}  // namespace

namespace {
void CheckRegion(std::string_view region) {
  bool ok = !region.empty() && region.size() <= 64;
  for (char c : region) ok = ok && ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-');
  if (!ok) throw UsageError("shm region name '" + std::string(region) + "' must match [a-z0-9_-]{1,64}");
}
}  // namespace

std::string ShmArena::Name(pid_t launcher_pid, std::string_view region) {
  CheckRegion(region);
  return "/k3-" + std::to_string(launcher_pid) + "-" + std::string(region);
}

ShmArena ShmArena::Create(const std::string& name, size_t bytes, bool populate) {
  Fd fd(::shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600));
  if (fd.get() < 0) throw ShmError("create", name, errno);
  ShmArena a;
  a.name_ = name;
  a.owns_name_ = true;  // from here the destructor unlinks, also if sizing fails below
  a.writable_ = true;
  if (::ftruncate(fd.get(), static_cast<off_t>(bytes)) != 0) throw ShmError("size to " + std::to_string(bytes), name, errno);
  a.data_ = MapFd(fd.get(), bytes, true, populate, name);
  a.size_ = bytes;
  return a;
}

ShmArena ShmArena::CreateMemfd(std::string_view region, size_t bytes) {
  CheckRegion(region);
  const std::string name = "k3-" + std::string(region);
  ShmArena a;
  a.name_ = name;
  a.fd_ = ::memfd_create(name.c_str(), MFD_CLOEXEC);  // close-on-exec: only chosen children inherit it
  if (a.fd_ < 0) throw ShmError("memfd_create", name, errno);
  a.writable_ = true;
  if (::ftruncate(a.fd_, static_cast<off_t>(bytes)) != 0) throw ShmError("size to " + std::to_string(bytes), name, errno);
  a.data_ = MapFd(a.fd_, bytes, true, false, name);
  a.size_ = bytes;
  return a;
}

std::string ShmArena::Spec() const { return fd_ >= 0 ? "fd:" + std::to_string(fd_) : name_; }

namespace {

// "fd:N" -> N, else -1.
int SpecFd(const std::string& spec) {
  if (spec.rfind("fd:", 0) != 0 || spec.size() == 3 || spec.size() > 12) return -1;
  long n = 0;
  for (char c : spec.substr(3)) {
    if (c < '0' || c > '9') return -1;
    n = n * 10 + (c - '0');
  }
  return n <= 1 << 30 ? static_cast<int>(n) : -1;
}

// The descriptor Open() maps: a named arena opened with the wanted access, or an inherited
// memfd, reopened read-only when so asked. The inherited descriptor is closed in every case
// (also on failure): after Open the process holds the memory only through its mapping.
int OpenSpec(const std::string& spec, bool writable) {
  const int inherited = SpecFd(spec);
  if (inherited < 0) {
    if (spec.rfind("fd:", 0) == 0) throw UsageError("arena '" + spec + "': want fd:N with N a descriptor number");
    const int fd = ::shm_open(spec.c_str(), writable ? O_RDWR : O_RDONLY, 0);
    if (fd < 0) throw ShmError("open", spec, errno);
    return fd;
  }
  const int flags = ::fcntl(inherited, F_GETFL);
  if (flags < 0) throw ShmError("inherited descriptor", spec, errno);
  if (writable) {
    if ((flags & O_ACCMODE) != O_RDWR) {
      ::close(inherited);
      throw RuntimeFailure("shm " + spec + ": inherited descriptor is not open read-write");
    }
    return inherited;
  }
  const std::string path = "/proc/self/fd/" + std::to_string(inherited);
  const int ro = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  const int err = errno;
  ::close(inherited);  // the writable descriptor must not stay in a read-only consumer
  if (ro < 0) throw ShmError("reopen read-only", spec, err);
  return ro;
}

}  // namespace

ShmArena ShmArena::Open(const std::string& name, bool writable, bool populate) {
  Fd fd(OpenSpec(name, writable));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) throw ShmError("stat", name, errno);
  ShmArena a;
  a.name_ = name;
  a.writable_ = writable;
  a.data_ = MapFd(fd.get(), static_cast<size_t>(st.st_size), writable, populate, name);
  a.size_ = static_cast<size_t>(st.st_size);
  return a;
}

ShmArena::~ShmArena() { Reset(); }

ShmArena::ShmArena(ShmArena&& o) noexcept
    : name_(std::move(o.name_)), data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)),
      writable_(o.writable_), owns_name_(std::exchange(o.owns_name_, false)), fd_(std::exchange(o.fd_, -1)) {}

ShmArena& ShmArena::operator=(ShmArena&& o) noexcept {
  if (this != &o) {
    Reset();
    name_ = std::move(o.name_);
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
    writable_ = o.writable_;
    owns_name_ = std::exchange(o.owns_name_, false);
    fd_ = std::exchange(o.fd_, -1);
  }
  return *this;
}

void ShmArena::Reset() {
  if (data_) ::munmap(data_, size_);
  data_ = nullptr;
  size_ = 0;
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  Unlink();
}

uint8_t* ShmArena::mutable_data() {
  if (!writable_) throw RuntimeFailure("shm " + name_ + ": mapped read-only, cannot write");
  return data_;
}

void ShmArena::Unlink() {
  if (owns_name_) ::shm_unlink(name_.c_str());  // ENOENT (already cleaned up) is fine
  owns_name_ = false;
}

namespace {

// Calls fn(name_without_slash, pid) for every /dev/shm entry named "k3-<pid>-<region>".
template <class Fn>
void ForEachK3Name(Fn fn) {
  DIR* d = ::opendir("/dev/shm");
  if (!d) return;
  while (const dirent* e = ::readdir(d)) {
    std::string_view n(e->d_name);
    if (n.substr(0, 3) != "k3-") continue;
    size_t dash = n.find('-', 3);
    if (dash == std::string_view::npos || dash == 3) continue;
    long pid = 0;
    bool digits = true;
    for (char c : n.substr(3, dash - 3)) {
      digits = digits && c >= '0' && c <= '9';
      pid = pid * 10 + (c - '0');
      if (pid > (1L << 31)) digits = false;
    }
    if (digits) fn(std::string(n), static_cast<pid_t>(pid));
  }
  ::closedir(d);
}

}  // namespace

size_t CleanupShm(pid_t launcher_pid) {
  std::vector<std::string> victims;
  ForEachK3Name([&](const std::string& n, pid_t pid) {
    if (pid == launcher_pid) victims.push_back(n);
  });
  size_t removed = 0;
  for (const auto& n : victims) removed += ::shm_unlink(("/" + n).c_str()) == 0;
  return removed;
}

size_t CleanupDeadLaunchers() {
  std::vector<std::string> victims;
  ForEachK3Name([&](const std::string& n, pid_t pid) {
    if (pid > 0 && ::kill(pid, 0) != 0 && errno == ESRCH) victims.push_back(n);
  });
  size_t removed = 0;
  for (const auto& n : victims) removed += ::shm_unlink(("/" + n).c_str()) == 0;
  return removed;
}

}  // namespace k3::ipc
