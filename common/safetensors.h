// safetensors reader: one file, or a sharded checkpoint through model.safetensors.index.json.
// Headers are validated completely before any tensor is trusted (sizes, overflow, offsets
// inside the data section and non-overlapping, dtype x shape == byte length, duplicates,
// UTF-8/JSON). Errors are k3::Error(kExitBadModel) with one line naming file and tensor.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace k3 {

enum class DType { F32, F16, BF16, U8, I8, I32, I64, F64, BOOL };
const char* DTypeName(DType d);
int64_t DTypeSize(DType d);

struct TensorInfo {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  int64_t file_offset = 0;  // absolute byte offset of the tensor data in its file
  int64_t nbytes = 0;
  int shard = 0;            // index into Checkpoint::shard_paths()
  int64_t numel() const;
};

// One parsed safetensors file (header only; data is read by whoever owns the I/O).
class SafetensorsFile {
 public:
  // Reads and validates the header of `path`.
  static SafetensorsFile Open(const std::string& path);
  const std::string& path() const { return path_; }
  int64_t file_size() const { return file_size_; }
  int64_t data_start() const { return data_start_; }  // 8 + header length
  const std::vector<TensorInfo>& tensors() const { return tensors_; }  // sorted by offset
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  std::string path_;
  int64_t file_size_ = 0;
  int64_t data_start_ = 0;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, std::string> metadata_;
};

// A checkpoint directory: model.safetensors.index.json + shards, or a single model.safetensors.
// Every shard named by the index is opened and validated; the index and headers must agree.
class Checkpoint {
 public:
  static Checkpoint Open(const std::string& dir);
  const std::string& dir() const { return dir_; }
  const std::vector<std::string>& shard_paths() const { return shard_paths_; }
  bool has(const std::string& name) const { return by_name_.count(name) != 0; }
  // Throws BadModel("<dir>: tensor <name> not found") when absent.
  const TensorInfo& at(const std::string& name) const;
  const std::map<std::string, TensorInfo>& all() const { return by_name_; }

 private:
  std::string dir_;
  std::vector<std::string> shard_paths_;
  std::map<std::string, TensorInfo> by_name_;
};

// Parses only an index JSON (for --dry-run on the real release where the shards are absent):
// name -> shard file name. Validates JSON, types and duplicate names.
struct SafetensorsIndex {
  int64_t total_size = -1;
  std::map<std::string, std::string> weight_map;
};
SafetensorsIndex ParseSafetensorsIndex(const std::string& json_text, const std::string& path_for_errors);
// Reads plain or .gz index files.
SafetensorsIndex LoadSafetensorsIndex(const std::string& path);

}  // namespace k3
