#include "trace.h"

#include <cstdio>
#include <filesystem>

#include "common/error.h"

namespace k3::compute {

Tracer::Tracer(std::string dir) : dir_(std::move(dir)) {
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  if (ec || !std::filesystem::is_directory(dir_))
    throw Error(kExitOutput, "cannot create trace directory " + dir_);
}

void Tracer::Append(const std::string& name, const void* data, int64_t bytes) {
  const std::string path = dir_ + "/" + name;
  const bool fresh = started_.insert(path).second;
  FILE* f = std::fopen(path.c_str(), fresh ? "wb" : "ab");
  if (!f) throw Error(kExitOutput, "cannot write " + path);
  const size_t n = std::fwrite(data, 1, static_cast<size_t>(bytes), f);
  const bool ok = std::fclose(f) == 0 && n == static_cast<size_t>(bytes);
  if (!ok) throw Error(kExitOutput, "cannot write " + path);
}

void Tracer::WriteText(const std::string& name, const std::string& text) {
  const std::string path = dir_ + "/" + name;
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) throw Error(kExitOutput, "cannot write " + path);
  const size_t n = std::fwrite(text.data(), 1, text.size(), f);
  if (std::fclose(f) != 0 || n != text.size()) throw Error(kExitOutput, "cannot write " + path);
}

}  // namespace k3::compute
