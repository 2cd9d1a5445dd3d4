#include "common/user_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "common/error.h"

namespace k3 {
namespace {

std::string Errno() { return std::strerror(errno); }

const char* KindOf(mode_t m) {
  if (S_ISDIR(m)) return "a directory";
  if (S_ISFIFO(m)) return "a FIFO";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  if (S_ISSOCK(m)) return "a socket";
  if (S_ISLNK(m)) return "a symbolic link";
  return "not a regular file";
}

// The process's umask without changing it (umask(2) can only be read by setting it, which
// races with other threads creating files): Linux reports it in /proc/self/status.
mode_t CurrentUmask() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("Umask:", 0) == 0) return static_cast<mode_t>(std::strtoul(line.c_str() + 6, nullptr, 8) & 0777);
  return 022;
}

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }

 private:
  int fd_;
};

std::string Prefix(std::string_view what, const std::string& path) {
  return what.empty() ? path : std::string(what) + " " + path;
}

// Opens for reading without blocking and checks type and size; returns the fd and size. A pipe
// (when `kinds` takes it) is switched back to blocking reads.
int OpenChecked(const std::string& path, uint64_t max_bytes, std::string_view what, ExitCode code, uint64_t* size,
                FileKinds kinds = FileKinds::kRegular) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) throw Error(code, Prefix(what, path) + ": cannot open (" + Errno() + ")");
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    throw Error(code, Prefix(what, path) + ": cannot stat (" + Errno() + ")");
  }
  if (S_ISFIFO(st.st_mode) && kinds == FileKinds::kRegularOrPipe) {
    ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    *size = 0;
    return fd;
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw Error(code, Prefix(what, path) + ": is " + KindOf(st.st_mode) + ", not a regular file");
  }
  if (static_cast<uint64_t>(st.st_size) > max_bytes) {
    ::close(fd);
    throw Error(code, Prefix(what, path) + ": " + std::to_string(st.st_size) + " bytes, above the limit of " +
                          std::to_string(max_bytes));
  }
  *size = static_cast<uint64_t>(st.st_size);
  return fd;
}

}  // namespace

uint64_t CheckUserFile(const std::string& path, uint64_t max_bytes, std::string_view what, ExitCode code) {
  uint64_t size = 0;
  Fd fd(OpenChecked(path, max_bytes, what, code, &size));
  return size;
}

std::string ReadUserFile(const std::string& path, uint64_t max_bytes, std::string_view what, ExitCode code,
                         FileKinds kinds) {
  uint64_t size = 0;
  Fd fd(OpenChecked(path, max_bytes, what, code, &size, kinds));
  std::string out;
  out.reserve(size);
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw Error(code, Prefix(what, path) + ": read failed (" + Errno() + ")");
    if (n == 0) break;
    if (out.size() + static_cast<uint64_t>(n) > max_bytes)
      throw Error(code, Prefix(what, path) + ": grew above the limit of " + std::to_string(max_bytes) + " bytes");
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

void CheckOutputPath(const std::string& path, std::string_view what) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode))
    throw Error(kExitOutput, Prefix(what, path) + ": is " + KindOf(st.st_mode) + "; not replaced");
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || ::access(dir.c_str(), W_OK) != 0)
    throw Error(kExitOutput, Prefix(what, path) + ": cannot write (its directory " + dir + " is missing or not writable)");
}

AtomicFile::AtomicFile(std::string path, std::string_view what, ExitCode code)
    : path_(std::move(path)), what_(what), code_(code) {
  struct stat st {};
  if (::lstat(path_.c_str(), &st) == 0) {
    if (!S_ISREG(st.st_mode)) throw Error(code_, Prefix(what_, path_) + ": is " + KindOf(st.st_mode) + "; not replaced");
    mode_ = st.st_mode & 0777;
  } else if (errno == ENOENT) {
    mode_ = 0666 & ~CurrentUmask();
  } else {
    throw Error(code_, Prefix(what_, path_) + ": cannot write (" + Errno() + ")");
  }
  std::string tmpl = path_ + ".tmp-XXXXXX";
  // mkostemp: O_CREAT|O_EXCL with a fresh random name, mode 0600 until Commit(); O_EXCL also
  // refuses to follow a symlink at that name.
  const int fd = ::mkostemp(tmpl.data(), O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) throw Error(code_, Prefix(what_, path_) + ": cannot write (" + Errno() + ")");
  tmp_ = tmpl;
  f_ = ::fdopen(fd, "wb");
  if (!f_) {
    const std::string why = Errno();
    ::close(fd);
    ::unlink(tmp_.c_str());
    throw Error(code_, Prefix(what_, path_) + ": cannot write (" + why + ")");
  }
}

AtomicFile::~AtomicFile() {
  if (f_) std::fclose(f_);
  if (!tmp_.empty()) ::unlink(tmp_.c_str());
}

bool AtomicFile::Write(const void* data, size_t n) {
  if (n > 0 && ok_) ok_ = std::fwrite(data, 1, n, f_) == n;
  return ok_;
}

void AtomicFile::Fail(const std::string& why) {
  if (f_) std::fclose(f_);
  f_ = nullptr;
  ::unlink(tmp_.c_str());
  tmp_.clear();
  throw Error(code_, Prefix(what_, path_) + ": " + why);
}

void AtomicFile::Commit() {
  if (!ok_) Fail("write failed (" + Errno() + ")");
  if (std::fflush(f_) != 0 || ::fsync(::fileno(f_)) != 0) Fail("write failed (" + Errno() + ")");
  if (::fchmod(::fileno(f_), mode_) != 0) Fail("cannot set its mode (" + Errno() + ")");
  const int closed = std::fclose(f_);
  f_ = nullptr;
  if (closed != 0) Fail("write failed (" + Errno() + ")");
  if (::rename(tmp_.c_str(), path_.c_str()) != 0) Fail("cannot rename into place (" + Errno() + ")");
  tmp_.clear();
}

void WriteFileAtomically(const std::string& path, std::string_view data, std::string_view what, ExitCode code) {
  AtomicFile f(path, what, code);
  f.Write(data);
  f.Commit();
}

}  // namespace k3
