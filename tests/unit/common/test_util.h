// Helpers for the common/ tests: a tiny safetensors writer that can also emit broken files,
// a temporary directory, and an assertion that a call fails with a given k3::Error.
#pragma once
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "common/error.h"

namespace k3::test {

struct Entry {
  std::string name;
  std::string dtype;
  std::string shape;  // JSON text, e.g. "[2,3]"
  int64_t begin = 0;
  int64_t end = 0;
};

inline int64_t DSize(const std::string& dt) {
  if (dt == "F32" || dt == "I32") return 4;
  if (dt == "BF16" || dt == "F16") return 2;
  if (dt == "F64" || dt == "I64") return 8;
  return 1;
}

// Header JSON written by hand (not by nlohmann) so tests can produce duplicates and junk.
inline std::string HeaderJson(const std::vector<Entry>& es, const std::string& metadata = "") {
  std::string h = "{";
  bool first = true;
  if (!metadata.empty()) {
    h += "\"__metadata__\":" + metadata;
    first = false;
  }
  for (const Entry& e : es) {
    if (!first) h += ",";
    first = false;
    h += "\"" + e.name + "\":{\"dtype\":\"" + e.dtype + "\",\"shape\":" + e.shape +
         ",\"data_offsets\":[" + std::to_string(e.begin) + "," + std::to_string(e.end) + "]}";
  }
  return h + "}";
}

// Packs entries back to back (dtype and shape given; sizes computed from shape numbers).
struct Tensor {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
};
inline std::vector<Entry> Pack(const std::vector<Tensor>& ts, int64_t* data_size) {
  std::vector<Entry> es;
  int64_t off = 0;
  for (const Tensor& t : ts) {
    int64_t n = DSize(t.dtype);
    std::string s = "[";
    for (size_t i = 0; i < t.shape.size(); ++i) {
      n *= t.shape[i];
      if (i) s += ',';
      s += std::to_string(t.shape[i]);
    }
    s += "]";
    es.push_back({t.name, t.dtype, s, off, off + n});
    off += n;
  }
  *data_size = off;
  return es;
}

// Writes: u64 header length (little-endian), header padded with spaces to a multiple of 8,
// then data_size bytes of a recognisable pattern. header_len_override replaces the length.
inline void WriteFile(const std::string& path, std::string header, int64_t data_size,
                      int64_t header_len_override = -1) {
  while (header.size() % 8 != 0) header += ' ';
  uint64_t n = header_len_override >= 0 ? static_cast<uint64_t>(header_len_override) : header.size();
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  for (int i = 0; i < 8; ++i) f.put(static_cast<char>((n >> (8 * i)) & 0xff));
  f << header;
  for (int64_t i = 0; i < data_size; ++i) f.put(static_cast<char>(i * 7 + 1));
}

inline void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << bytes;
}

inline std::string ReadBytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

// A fresh directory per test, removed afterwards.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = std::filesystem::temp_directory_path().string() + "/k3_common_test_XXXXXX";
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    const char* d = ::mkdtemp(buf.data());
    if (d == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = d;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& f) const { return path_ + "/" + f; }

 private:
  std::string path_;
};

// Expects fn() to throw k3::Error with `code`, a one-line message containing every needle.
inline void ExpectError(const std::function<void()>& fn, ExitCode code, const std::vector<std::string>& needles) {
  try {
    fn();
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_EQ(e.code(), code) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << "message is not one line: " << msg;
    for (const std::string& n : needles) EXPECT_NE(msg.find(n), std::string::npos) << "missing \"" << n << "\" in: " << msg;
    return;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "threw a non-k3 exception: " << e.what();
    return;
  }
  ADD_FAILURE() << "no error was thrown";
}

inline void ExpectBadModel(const std::function<void()>& fn, const std::vector<std::string>& needles) {
  ExpectError(fn, kExitBadModel, needles);
}

}  // namespace k3::test
