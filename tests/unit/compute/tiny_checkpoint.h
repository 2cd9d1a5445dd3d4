// The fixture the in-process compute tests share: the tiny checkpoint ($K3_TESTDATA/tiny, the
// generator's adversarial 13-layer model) mapped, its globals bound and its layers and experts
// read from the mapping.
#pragma once
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

#include "forward.h"
#include "mmap_source.h"

namespace k3::compute {

inline std::string TinyDir() {
  const char* d = std::getenv("K3_TESTDATA");
  return d ? std::string(d) + "/tiny" : std::string();
}

class TinyCheckpoint : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string dir = TinyDir();
    ASSERT_TRUE(!dir.empty() && std::filesystem::exists(dir + "/config.json"))
        << "tiny checkpoint missing at '" << dir << "' (K3_TESTDATA)";
    cfg_ = LoadModelConfig(dir + "/config.json");
    ck_ = std::make_unique<MappedCheckpoint>(dir);
    globals_ = BindGlobals(cfg_, ck_->Resolver());
    layers_ = std::make_unique<MmapLayerSource>(cfg_, *ck_);
    experts_ = std::make_unique<MmapExpertSource>(cfg_, *ck_);
  }

  ModelConfig cfg_;
  std::unique_ptr<MappedCheckpoint> ck_;
  GlobalWeights globals_;
  std::unique_ptr<MmapLayerSource> layers_;
  std::unique_ptr<MmapExpertSource> experts_;
};

}  // namespace k3::compute
