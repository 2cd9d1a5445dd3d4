// safetensors reader. Nothing in a header is trusted until every field has been checked:
// the engine later hands these offsets to O_DIRECT reads and shared-memory copies, so an
// unchecked offset would turn a corrupt file into a wild read instead of an error.
#include "common/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>

#include "common/error.h"
#include "common/user_file.h"
#include "common/json_strict.h"

namespace k3 {
namespace {

// A real header is ~1 MB (5,500 tensors); anything near this cap is corrupt.
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;
// The real index is ~60 MB uncompressed.
constexpr size_t kMaxIndexBytes = 1ull << 30;

struct DTypeEntry {
  const char* name;
  DType dtype;
  int64_t size;
};
constexpr DTypeEntry kDTypes[] = {
    {"F32", DType::F32, 4}, {"F16", DType::F16, 2}, {"BF16", DType::BF16, 2},
    {"U8", DType::U8, 1},   {"I8", DType::I8, 1},   {"I32", DType::I32, 4},
    {"I64", DType::I64, 8}, {"F64", DType::F64, 8}, {"BOOL", DType::BOOL, 1},
};

bool ParseDType(const std::string& s, DType* out) {
  for (const auto& e : kDTypes) {
    if (s == e.name) {
      *out = e.dtype;
      return true;
    }
  }
  return false;
}

bool CheckedMul(int64_t a, int64_t b, int64_t* out) { return !__builtin_mul_overflow(a, b, out); }

// RAII file descriptor so every error path closes it.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

// Reads exactly n bytes at offset; short reads are retried until EOF.
void ReadExact(int fd, void* buf, size_t n, int64_t offset, const std::string& path) {
  char* p = static_cast<char*>(buf);
  size_t done = 0;
  while (done < n) {
    const ssize_t r = ::pread(fd, p + done, n - done, static_cast<off_t>(offset + done));
    if (r < 0) {
      if (errno == EINTR) continue;
      throw RuntimeFailure(path + ": read failed: " + std::strerror(errno));
    }
    if (r == 0) throw BadModel(path + ": file ended while reading the header");
    done += static_cast<size_t>(r);
  }
}

// Non-negative integer JSON value that fits int64 (rejects floats, negatives, booleans).
bool GetNonNegInt(const nlohmann::json& v, int64_t* out) {
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(INT64_MAX)) return false;
    *out = static_cast<int64_t>(u);
    return true;
  }
  if (v.is_number_integer()) {
    const int64_t s = v.get<int64_t>();
    if (s < 0) return false;
    *out = s;
    return true;
  }
  return false;
}

TensorInfo ParseEntry(const std::string& path, const std::string& name, const nlohmann::json& e,
                      int64_t data_start, int64_t data_size) {
  const std::string where = path + ": tensor " + Printable(name) + ": ";
  if (!e.is_object()) throw BadModel(where + "entry is not a JSON object");
  for (auto it = e.begin(); it != e.end(); ++it) {
    if (it.key() != "dtype" && it.key() != "shape" && it.key() != "data_offsets")
      throw BadModel(where + "unexpected field \"" + Printable(it.key()) + "\"");
  }
  if (!e.contains("dtype") || !e["dtype"].is_string())
    throw BadModel(where + "missing or non-string \"dtype\"");
  if (!e.contains("shape") || !e["shape"].is_array())
    throw BadModel(where + "missing or non-array \"shape\"");
  if (!e.contains("data_offsets") || !e["data_offsets"].is_array() || e["data_offsets"].size() != 2)
    throw BadModel(where + "\"data_offsets\" must be an array of two integers");

  TensorInfo t;
  t.name = name;
  const std::string dt = e["dtype"].get<std::string>();
  if (!ParseDType(dt, &t.dtype)) throw BadModel(where + "unknown dtype \"" + Printable(dt) + "\"");

  int64_t numel = 1;
  for (const auto& d : e["shape"]) {
    int64_t dim = 0;
    if (!GetNonNegInt(d, &dim))
      throw BadModel(where + "shape values must be non-negative integers, got " + Printable(d.dump()));
    if (!CheckedMul(numel, dim, &numel)) throw BadModel(where + "shape element count overflows");
    t.shape.push_back(dim);
  }
  if (!CheckedMul(numel, DTypeSize(t.dtype), &t.nbytes))
    throw BadModel(where + "byte size overflows");

  int64_t begin = 0, end = 0;
  if (!GetNonNegInt(e["data_offsets"][0], &begin) || !GetNonNegInt(e["data_offsets"][1], &end))
    throw BadModel(where + "data_offsets must be non-negative integers");
  if (end < begin)
    throw BadModel(where + "data_offsets end " + std::to_string(end) + " < begin " + std::to_string(begin));
  if (end > data_size)
    throw BadModel(where + "data_offsets end " + std::to_string(end) + " beyond the data section (" +
                   std::to_string(data_size) + " bytes; file truncated?)");
  if (end - begin != t.nbytes)
    throw BadModel(where + std::string(DTypeName(t.dtype)) + " x shape is " + std::to_string(t.nbytes) +
                   " bytes but data_offsets span " + std::to_string(end - begin));
  t.file_offset = data_start + begin;
  return t;
}

// Shard names come from an untrusted index: only a plain file name in the same directory.
void CheckPlainFileName(const std::string& f, const std::string& path, const std::string& tensor) {
  if (f.empty() || f == "." || f == ".." || f.find('/') != std::string::npos ||
      f.find('\\') != std::string::npos || f.find('\0') != std::string::npos)
    throw BadModel(path + ": tensor " + Printable(tensor) + ": shard \"" + Printable(f) +
                   "\" is not a plain file name");
}

bool FileExists(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

}  // namespace

const char* DTypeName(DType d) {
  for (const auto& e : kDTypes)
    if (e.dtype == d) return e.name;
  return "?";
}

int64_t DTypeSize(DType d) {
  for (const auto& e : kDTypes)
    if (e.dtype == d) return e.size;
  return 0;
}

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;  // cannot overflow: validated when the header was parsed
  return n;
}

SafetensorsFile SafetensorsFile::Open(const std::string& path) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));  // a FIFO must not block: refused below
  if (fd.get() < 0) throw BadModel(path + ": cannot open: " + std::strerror(errno));
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) throw RuntimeFailure(path + ": stat failed: " + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) throw BadModel(path + ": not a regular file");

  SafetensorsFile f;
  f.path_ = path;
  f.file_size_ = static_cast<int64_t>(st.st_size);
  if (f.file_size_ < 8)
    throw BadModel(path + ": " + std::to_string(f.file_size_) + "-byte file is too small for a safetensors header");
  unsigned char len_bytes[8];
  ReadExact(fd.get(), len_bytes, 8, 0, path);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | len_bytes[i];  // little-endian u64
  if (n < 2 || n > kMaxHeaderBytes)
    throw BadModel(path + ": header length " + std::to_string(n) + " is implausible (limit " +
                   std::to_string(kMaxHeaderBytes) + ")");
  if (n > static_cast<uint64_t>(f.file_size_ - 8))
    throw BadModel(path + ": header length " + std::to_string(n) + " exceeds the file size " +
                   std::to_string(f.file_size_));
  std::string header(n, '\0');
  ReadExact(fd.get(), header.data(), n, 8, path);
  f.data_start_ = 8 + static_cast<int64_t>(n);
  const int64_t data_size = f.file_size_ - f.data_start_;

  const nlohmann::json j = ParseJsonStrict(header, path + ": header");
  if (!j.is_object()) throw BadModel(path + ": header is not a JSON object");
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (!it.value().is_object()) throw BadModel(path + ": __metadata__ is not an object");
      for (auto m = it.value().begin(); m != it.value().end(); ++m) {
        if (!m.value().is_string())
          throw BadModel(path + ": __metadata__ value of \"" + Printable(m.key()) + "\" is not a string");
        f.metadata_[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    if (it.key().empty()) throw BadModel(path + ": empty tensor name");
    f.tensors_.push_back(ParseEntry(path, it.key(), it.value(), f.data_start_, data_size));
  }

  // Overlap check on the sorted list: each tensor must end at or before the next begins.
  std::sort(f.tensors_.begin(), f.tensors_.end(), [](const TensorInfo& a, const TensorInfo& b) {
    return a.file_offset != b.file_offset ? a.file_offset < b.file_offset : a.nbytes < b.nbytes;
  });
  for (size_t i = 1; i < f.tensors_.size(); ++i) {
    const TensorInfo& a = f.tensors_[i - 1];
    const TensorInfo& b = f.tensors_[i];
    if (a.file_offset + a.nbytes > b.file_offset)
      throw BadModel(path + ": tensor " + Printable(b.name) + " overlaps tensor " + Printable(a.name));
  }
  return f;
}

SafetensorsIndex ParseSafetensorsIndex(const std::string& json_text, const std::string& path) {
  const nlohmann::json j = ParseJsonStrict(json_text, path);
  if (!j.is_object()) throw BadModel(path + ": index is not a JSON object");
  SafetensorsIndex idx;
  if (j.contains("metadata")) {
    const auto& m = j["metadata"];
    if (!m.is_object()) throw BadModel(path + ": \"metadata\" is not an object");
    if (m.contains("total_size")) {
      if (!GetNonNegInt(m["total_size"], &idx.total_size))
        throw BadModel(path + ": metadata.total_size is not a non-negative integer");
    }
  }
  if (!j.contains("weight_map") || !j["weight_map"].is_object())
    throw BadModel(path + ": missing or non-object \"weight_map\"");
  for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
    if (it.key().empty()) throw BadModel(path + ": empty tensor name in weight_map");
    if (!it.value().is_string())
      throw BadModel(path + ": tensor " + Printable(it.key()) + ": shard name is not a string");
    const std::string shard = it.value().get<std::string>();
    CheckPlainFileName(shard, path, it.key());
    idx.weight_map.emplace(it.key(), shard);
  }
  if (idx.weight_map.empty()) throw BadModel(path + ": weight_map is empty");
  return idx;
}

SafetensorsIndex LoadSafetensorsIndex(const std::string& path) {
  // gzread passes plain files through unchanged, so one path reads both forms. A FIFO or
  // device is refused first (gzopen would block on it or read it without end).
  CheckUserFile(path, kMaxIndexBytes, "", kExitBadModel);
  gzFile gz = gzopen(path.c_str(), "rb");
  if (gz == nullptr) throw BadModel(path + ": cannot open: " + std::strerror(errno));
  std::string text;
  char buf[1 << 16];
  for (;;) {
    const int r = gzread(gz, buf, sizeof(buf));
    if (r < 0) {
      int errnum = 0;
      const std::string msg = gzerror(gz, &errnum);
      gzclose(gz);
      throw BadModel(path + ": cannot read: " + msg);
    }
    if (r == 0) break;
    text.append(buf, static_cast<size_t>(r));
    if (text.size() > kMaxIndexBytes) {
      gzclose(gz);
      throw BadModel(path + ": index larger than " + std::to_string(kMaxIndexBytes) + " bytes");
    }
  }
  // A gzip stream cut short reads as a short stream; gzclose reports it (Z_BUF_ERROR).
  const int rc = gzclose(gz);
  if (rc != Z_OK) throw BadModel(path + ": truncated or corrupt gzip data");
  return ParseSafetensorsIndex(text, path);
}

Checkpoint Checkpoint::Open(const std::string& dir) {
  Checkpoint c;
  c.dir_ = dir;
  const std::string index_path = dir + "/model.safetensors.index.json";
  const std::string single_path = dir + "/model.safetensors";
  if (!FileExists(index_path)) {
    if (!FileExists(single_path))
      throw BadModel(dir + ": neither model.safetensors.index.json nor model.safetensors found");
    SafetensorsFile f = SafetensorsFile::Open(single_path);
    c.shard_paths_.push_back(single_path);
    for (TensorInfo t : f.tensors()) {
      t.shard = 0;
      c.by_name_.emplace(t.name, std::move(t));
    }
    return c;
  }

  const SafetensorsIndex idx = LoadSafetensorsIndex(index_path);
  // Shards in sorted name order; files in the directory that the index does not name are
  // never opened.
  std::set<std::string> shard_names;
  for (const auto& [name, shard] : idx.weight_map) shard_names.insert(shard);
  std::map<std::string, int> shard_no;
  std::vector<SafetensorsFile> files;
  for (const std::string& s : shard_names) {
    const std::string p = dir + "/" + s;
    shard_no[s] = static_cast<int>(files.size());
    files.push_back(SafetensorsFile::Open(p));
    c.shard_paths_.push_back(p);
  }
  // Name lookup per shard, then every index entry must be found in its own shard.
  std::vector<std::map<std::string, const TensorInfo*>> by_shard(files.size());
  for (size_t i = 0; i < files.size(); ++i)
    for (const TensorInfo& t : files[i].tensors()) by_shard[i][t.name] = &t;
  for (const auto& [name, shard] : idx.weight_map) {
    const int si = shard_no.at(shard);
    auto it = by_shard[si].find(name);
    if (it == by_shard[si].end())
      throw BadModel(index_path + ": tensor " + Printable(name) + " is listed in shard " + shard +
                     " but that shard has no such tensor");
    TensorInfo t = *it->second;
    t.shard = si;
    c.by_name_.emplace(name, std::move(t));
  }
  return c;
}

const TensorInfo& Checkpoint::at(const std::string& name) const {
  auto it = by_name_.find(name);
  if (it == by_name_.end()) throw BadModel(dir_ + ": tensor " + Printable(name) + " not found");
  return it->second;
}

}  // namespace k3
