// ExpertVerifier (services/expert_fetcher/expert_verify.h) in-process: experts of several
// 4 MiB chunks, hashed by several threads, come back once each; the ones whose bytes differ
// from the manifest come back as corrupt reads naming the server; the rest unchanged.
#include "services/expert_fetcher/expert_verify.h"

#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <thread>
#include <vector>

namespace k3::svc {
namespace {

TEST(ExpertVerifier, ChecksEveryExpertAgainstTheManifest) {
  Manifest m;
  m.first_layer = 1;
  m.num_layers = 2;
  m.num_experts = 6;
  std::vector<std::vector<uint8_t>> experts;
  for (int e = 0; e < 6; ++e) {
    // Sizes around the chunk boundary, and one of several chunks.
    const uint64_t n = e == 5 ? 3 * kDigestChunkBytes + 17 : kDigestChunkBytes - 1 + static_cast<uint64_t>(e);
    std::vector<uint8_t> b(n);
    for (uint64_t i = 0; i < n; ++i) b[i] = static_cast<uint8_t>(i * 131 + static_cast<uint64_t>(e) * 7 + (i >> 16));
    m.digests.push_back(ExpertDigestOf(b.data(), b.size()));
    experts.push_back(std::move(b));
  }
  experts[2][kDigestChunkBytes / 2] ^= 0x40;     // altered in its first chunk
  experts[5][2 * kDigestChunkBytes + 3] ^= 0x01;  // altered in its third chunk
  zmq::context_t ctx;
  ExpertVerifier v(ctx, "verify-test", m, "/m/k3-manifest.json", 3);
  for (int e = 0; e < 6; ++e)
    v.Submit({static_cast<uint64_t>(100 + e), experts[static_cast<size_t>(e)].size(), ""}, 1, e,
             experts[static_cast<size_t>(e)].data(), experts[static_cast<size_t>(e)].size(), "tcp://10.0.0.9:5557");
  std::map<uint64_t, ReadDone> got;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (got.size() < 6 && std::chrono::steady_clock::now() < deadline) {
    zmq::pollitem_t item{v.notifier().handle(), 0, ZMQ_POLLIN, 0};
    zmq::poll(&item, 1, std::chrono::milliseconds(100));
    for (ReadDone& d : v.TakeCompleted()) EXPECT_TRUE(got.emplace(d.tag, std::move(d)).second) << "twice: " << d.tag;
  }
  ASSERT_EQ(got.size(), 6u);
  EXPECT_EQ(v.pending(), 0u);
  EXPECT_EQ(v.verified(), 4u);
  EXPECT_EQ(v.mismatches(), 2u);
  for (int e = 0; e < 6; ++e) {
    const ReadDone& d = got.at(static_cast<uint64_t>(100 + e));
    if (e == 2 || e == 5) {
      EXPECT_TRUE(d.corrupt);
      EXPECT_EQ(d.bytes, 0u);
      EXPECT_NE(d.error.find("expert server tcp://10.0.0.9:5557"), std::string::npos) << d.error;
      EXPECT_NE(d.error.find("/m/k3-manifest.json"), std::string::npos) << d.error;
    } else {
      EXPECT_EQ(d.error, "") << e;
      EXPECT_FALSE(d.corrupt);
      EXPECT_EQ(d.bytes, experts[static_cast<size_t>(e)].size());
    }
  }
}

}  // namespace
}  // namespace k3::svc
