// Standalone weight sources: the checkpoint's shards mapped read-only, layers bound once at
// load, experts bound on demand (offsets from the safetensors headers, never computed).
#pragma once
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "membw_probe.h"
#include "sources.h"

namespace k3::compute {

class MappedCheckpoint {
 public:
  explicit MappedCheckpoint(const std::string& dir);  // throws BadModel / RuntimeFailure
  ~MappedCheckpoint();
  MappedCheckpoint(const MappedCheckpoint&) = delete;
  MappedCheckpoint& operator=(const MappedCheckpoint&) = delete;

  const Checkpoint& checkpoint() const { return ckpt_; }
  TensorResolver Resolver() const;
  std::vector<MemRegion> Regions() const;  // the shard mappings (for the bandwidth probe)

 private:
  Checkpoint ckpt_;
  std::vector<std::pair<void*, size_t>> maps_;  // one read-only mapping per shard
};

class MmapLayerSource : public LayerSource {
 public:
  // Binds every layer now; `progress(l)` is called after each.
  MmapLayerSource(const ModelConfig& cfg, const MappedCheckpoint& ck,
                  const std::function<void(int64_t)>& progress = {});
  const LayerWeights& Acquire(int64_t layer) override;
  void Release(int64_t) override {}
  const LayerWeights* Peek(int64_t layer) override { return &layers_.at(static_cast<size_t>(layer)); }

 private:
  std::vector<LayerWeights> layers_;
};

class MmapExpertSource : public ExpertSource {
 public:
  MmapExpertSource(const ModelConfig& cfg, const MappedCheckpoint& ck);
  void Request(int64_t layer, const std::vector<int32_t>& experts) override;
  int32_t NextReady(int64_t layer) override;  // in request order: everything is mapped
  ExpertWeights Acquire(int64_t layer, int32_t expert) override;
  void Release(int64_t, int32_t) override {}

 private:
  const ModelConfig& cfg_;
  TensorResolver find_;
  std::deque<int32_t> pending_;
};

}  // namespace k3::compute
