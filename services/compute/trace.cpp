#include "trace.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <filesystem>

#include "common/error.h"
#include "common/user_file.h"

namespace k3::compute {

Tracer::Tracer(std::string dir) : dir_(std::move(dir)) {
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  if (ec || !std::filesystem::is_directory(dir_))
    throw Error(kExitOutput, "cannot create trace directory " + dir_);
}

void Tracer::Append(const std::string& name, const void* data, int64_t bytes) {
  const std::string path = dir_ + "/" + name;
  if (started_.insert(path).second) {  // the first piece makes the file
    WriteFileAtomically(path, {static_cast<const char*>(data), static_cast<size_t>(bytes)}, "", kExitOutput);
    return;
  }
  // Later pieces append to the file this run made: never through a symlink put in its place.
  const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) throw Error(kExitOutput, "cannot write " + path);
  const char* p = static_cast<const char*>(data);
  int64_t left = bytes;
  while (left > 0) {
    const ssize_t n = ::write(fd, p, static_cast<size_t>(left));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    p += n;
    left -= n;
  }
  if (::close(fd) != 0 || left != 0) throw Error(kExitOutput, "cannot write " + path);
}

void Tracer::WriteText(const std::string& name, const std::string& text) {
  WriteFileAtomically(dir_ + "/" + name, text, "", kExitOutput);
}

}  // namespace k3::compute
