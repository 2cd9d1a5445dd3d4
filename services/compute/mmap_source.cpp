#include "mmap_source.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/error.h"

namespace k3::compute {

MappedCheckpoint::MappedCheckpoint(const std::string& dir) : ckpt_(Checkpoint::Open(dir)) {
  for (const std::string& path : ckpt_.shard_paths()) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw RuntimeFailure("cannot open " + path + ": " + std::strerror(errno));
    struct stat sb {};
    if (::fstat(fd, &sb) != 0) {
      ::close(fd);
      throw RuntimeFailure("cannot stat " + path + ": " + std::strerror(errno));
    }
    const size_t len = static_cast<size_t>(sb.st_size);
    void* p = len ? ::mmap(nullptr, len, PROT_READ, MAP_PRIVATE, fd, 0) : nullptr;
    ::close(fd);
    if (p == MAP_FAILED) throw RuntimeFailure("cannot mmap " + path + ": " + std::strerror(errno));
    maps_.emplace_back(p, len);
  }
}

MappedCheckpoint::~MappedCheckpoint() {
  for (auto& [p, len] : maps_)
    if (p) ::munmap(p, len);
}

std::vector<MemRegion> MappedCheckpoint::Regions() const {
  std::vector<MemRegion> r;
  for (const auto& [p, n] : maps_) r.push_back({p, n});
  return r;
}

TensorResolver MappedCheckpoint::Resolver() const {
  return [this](const std::string& name) {
    const TensorInfo& info = ckpt_.at(name);  // throws BadModel naming the tensor
    const auto& m = maps_.at(static_cast<size_t>(info.shard));
    if (info.file_offset < 0 || static_cast<size_t>(info.file_offset + info.nbytes) > m.second)
      throw BadModel("tensor " + name + ": data outside its shard");
    RawTensor r;
    r.data = static_cast<const uint8_t*>(m.first) + info.file_offset;
    r.info = &info;
    return r;
  };
}

MmapLayerSource::MmapLayerSource(const ModelConfig& cfg, const MappedCheckpoint& ck,
                                 const std::function<void(int64_t)>& progress) {
  const TensorResolver find = ck.Resolver();
  for (int64_t l = 0; l < cfg.num_layers; ++l) {
    layers_.push_back(BindLayer(cfg, l, find));
    if (progress) progress(l);
  }
}

const LayerWeights& MmapLayerSource::Acquire(int64_t layer) {
  return layers_.at(static_cast<size_t>(layer));
}

MmapExpertSource::MmapExpertSource(const ModelConfig& cfg, const MappedCheckpoint& ck)
    : cfg_(cfg), find_(ck.Resolver()) {}

void MmapExpertSource::Request(int64_t, const std::vector<int32_t>& experts) {
  pending_.assign(experts.begin(), experts.end());
}

int32_t MmapExpertSource::NextReady(int64_t) {
  if (pending_.empty()) throw RuntimeFailure("expert source: NextReady with nothing requested");
  const int32_t e = pending_.front();
  pending_.pop_front();
  return e;
}

ExpertWeights MmapExpertSource::Acquire(int64_t layer, int32_t expert) {
  return BindExpert(cfg_, layer, expert, find_);
}

}  // namespace k3::compute
