// State files (common/state_file.h): round trip, and every kind of bad file refused with one
// line and exit 7 (corrupt byte anywhere, truncation, wrong version/magic, another model,
// other expert inputs, too small a context), written atomically.
#include "common/state_file.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <limits>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "common/error.h"

namespace k3::state {
namespace {

namespace fs = std::filesystem;

std::string Slurp(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}
void Spit(const std::string& p, const std::string& s) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f << s;
}

class StateFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cfg_ = LoadModelConfig(std::string(K3_SOURCE_DIR) + "/models/k3-demo-tiny/config.json");
    dir_ = fs::temp_directory_path() / ("k3-state-test-" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    path_ = (dir_ / "s.k3state").string();
    info_.model = {0x1234, 0x5678};
    info_.position = 5;
    info_.ids = {1, 2, 3, 4, 5, 6};  // the last one not consumed yet
    info_.extra = std::string("history\0bytes", 13);
    body_.resize(BodyFloats(cfg_, info_.position));
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> u(-2, 2);
    for (float& f : body_) f = u(rng);
  }
  void TearDown() override { fs::remove_all(dir_); }

  void Write() {
    // Split into several sections, as compute passes them.
    const size_t h = body_.size() / 3;
    WriteStateFile(path_, cfg_, info_,
                   {std::span<const float>(body_.data(), h), std::span<const float>(body_.data() + h, body_.size() - h)});
  }
  Expect Want() const {
    Expect w;
    w.cfg = &cfg_;
    w.model = info_.model;
    w.context = 4096;
    return w;
  }
  // The refusal message (and that it is exit 7, one line).
  std::string Refusal(const Expect& w) {
    try {
      ReadStateFile(path_, w, nullptr);
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), kExitBadInput) << e.what();
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
      return e.what();
    }
    return "";
  }

  ModelConfig cfg_;
  fs::path dir_;
  std::string path_;
  StateInfo info_;
  std::vector<float> body_;
};

TEST_F(StateFileTest, RoundTripKeepsEveryBit) {
  Write();
  std::vector<float> got, tail;
  int64_t asked = -1;
  const StateInfo r = ReadStateFile(path_, Want(), [&](int64_t position) {
    asked = position;
    got.resize(BodyFloats(cfg_, position) - 100);
    tail.resize(100);
    return std::vector<std::span<float>>{got, tail};
  });
  EXPECT_EQ(asked, info_.position);
  got.insert(got.end(), tail.begin(), tail.end());
  EXPECT_EQ(r.ids, info_.ids);
  EXPECT_EQ(r.extra, info_.extra);
  EXPECT_EQ(r.position, info_.position);
  EXPECT_EQ(r.model, info_.model);
  ASSERT_EQ(got.size(), body_.size());
  EXPECT_EQ(std::memcmp(got.data(), body_.data(), got.size() * 4), 0);
  EXPECT_EQ(fs::file_size(path_), static_cast<uintmax_t>(kHeaderBytes + 4 * 6 + 4 * body_.size() + 13 + 8));
  // Checking without the body gives the same header.
  EXPECT_EQ(ReadStateFile(path_, Want(), nullptr).ids, info_.ids);
  // No temporary file is left next to it.
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 1);
}

TEST_F(StateFileTest, MlaSectionsGrowWithPosition) {
  // Per position: kv_lora + rope floats for every MLA layer; KDA sections do not grow.
  int64_t mla = 0;
  for (MixerKind k : cfg_.layer_kind) mla += k == MixerKind::MLA;
  ASSERT_GT(mla, 0);
  EXPECT_EQ(BodyFloats(cfg_, 11) - BodyFloats(cfg_, 10),
            static_cast<uint64_t>(mla * (cfg_.kv_lora_rank + cfg_.qk_rope_head_dim)));
}

TEST_F(StateFileTest, AnyFlippedByteIsRefused) {
  Write();
  const std::string good = Slurp(path_);
  std::mt19937 rng(3);
  std::vector<size_t> where;
  for (size_t i = 0; i < static_cast<size_t>(kHeaderBytes) + 24; ++i) where.push_back(i);  // header, ids
  for (int i = 0; i < 200; ++i) where.push_back(rng() % good.size());
  where.push_back(good.size() - 1);   // checksum
  where.push_back(good.size() - 10);  // extra
  for (size_t at : where) {
    std::string bad = good;
    bad[at] = static_cast<char>(bad[at] ^ 0x10);
    Spit(path_, bad);
    EXPECT_NE(Refusal(Want()), "") << "byte " << at << " flipped was accepted";
  }
}

TEST_F(StateFileTest, TruncatedOrLongerIsRefused) {
  Write();
  const std::string good = Slurp(path_);
  for (size_t n : {size_t{0}, size_t{7}, size_t{kHeaderBytes}, size_t{kHeaderBytes + 9}, good.size() / 2, good.size() - 1}) {
    Spit(path_, good.substr(0, n));
    const std::string msg = Refusal(Want());
    EXPECT_NE(msg.find("truncated"), std::string::npos) << n << ": " << msg;
  }
  Spit(path_, good + "x");
  EXPECT_NE(Refusal(Want()).find("trailing"), std::string::npos);
}

TEST_F(StateFileTest, VersionAndMagicAreChecked) {
  Write();
  std::string s = Slurp(path_);
  s[8] = 2;  // version 2
  Spit(path_, s);
  EXPECT_NE(Refusal(Want()).find("version 2"), std::string::npos);
  s = Slurp(path_);
  s[0] = 'X';
  Spit(path_, s);
  EXPECT_NE(Refusal(Want()).find("magic"), std::string::npos);
  Spit(path_, "not a state file at all, but long enough to hold a header of eighty bytes and a checksum too....");
  EXPECT_NE(Refusal(Want()).find("magic"), std::string::npos);
}

TEST_F(StateFileTest, AnotherModelExpertInputsOrContextAreRefused) {
  Write();
  Expect w = Want();
  w.model.config_hash ^= 1;
  EXPECT_NE(Refusal(w).find("another model"), std::string::npos);
  w = Want();
  w.model.layout_hash ^= 1;
  EXPECT_NE(Refusal(w).find("another model"), std::string::npos);
  w = Want();
  w.expert_inputs_bf16 = true;
  EXPECT_NE(Refusal(w).find("expert_inputs"), std::string::npos);
  w = Want();
  w.context = 5;  // six ids
  EXPECT_NE(Refusal(w).find("context"), std::string::npos);
  w.context = 6;
  EXPECT_EQ(Refusal(w), "");
  // Another geometry: the section sizes no longer match.
  ModelConfig other = cfg_;
  other.kv_lora_rank += 1;
  w = Want();
  w.cfg = &other;
  EXPECT_NE(Refusal(w), "");
}

TEST_F(StateFileTest, MissingFileIsBadInput) {
  EXPECT_NE(Refusal(Want()).find("cannot read"), std::string::npos);
}

// A NaN or infinity anywhere in the floats, with a valid checksum (WriteStateFile computes it),
// is refused: such a state would run on silently as garbage ids.
TEST_F(StateFileTest, NonFiniteFloatsAreRefused) {
  for (const float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    for (const size_t at : {size_t{0}, body_.size() / 2, body_.size() - 1}) {
      const float keep = body_[at];
      body_[at] = bad;
      Write();
      body_[at] = keep;
      EXPECT_NE(Refusal(Want()).find("not finite"), std::string::npos) << at;
    }
  }
  Write();  // the same file with finite floats loads
  EXPECT_EQ(ReadStateFile(path_, Want(), nullptr).position, info_.position);
}

// A FIFO (which nothing writes to) is refused at once instead of blocking the load.
TEST_F(StateFileTest, AFifoIsRefusedWithoutBlocking) {
  ASSERT_EQ(::mkfifo(path_.c_str(), 0600), 0);
  EXPECT_NE(Refusal(Want()).find("is a FIFO"), std::string::npos);
}

TEST_F(StateFileTest, FailedWriteLeavesTheOldFile) {
  Write();
  const std::string before = Slurp(path_);
  // Wrong section sizes: refused before anything is written.
  EXPECT_THROW(WriteStateFile(path_, cfg_, info_, {std::span<const float>(body_.data(), 3)}), Error);
  EXPECT_EQ(Slurp(path_), before);
  // An unwritable place: exit 4, nothing left behind.
  try {
    WriteStateFile((dir_ / "missing" / "s").string(), cfg_, info_, {std::span<const float>(body_)});
    ADD_FAILURE() << "wrote into a missing directory";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), kExitOutput);
  }
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 1);
}

TEST(StateIdentity, FollowsConfigBytesAndWeights) {
  const std::string demo = std::string(K3_SOURCE_DIR) + "/models/k3-demo-tiny";
  const ModelIdentity a = IdentifyModel(demo);
  EXPECT_EQ(a, IdentifyModel(demo));
  // A copy with one more byte in config.json, and one with one weight byte changed.
  const fs::path tmp = fs::temp_directory_path() / ("k3-state-id-" + std::to_string(::getpid()));
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  fs::copy(demo, tmp / "m");
  EXPECT_EQ(IdentifyModel((tmp / "m").string()), a);
  {
    std::ofstream f(tmp / "m" / "config.json", std::ios::app);
    f << " ";
  }
  const ModelIdentity b = IdentifyModel((tmp / "m").string());
  EXPECT_NE(b.config_hash, a.config_hash);
  EXPECT_EQ(b.layout_hash, a.layout_hash);
  fs::remove_all(tmp / "m");
  fs::copy(demo, tmp / "m");
  std::string shard;
  for (const auto& e : fs::directory_iterator(tmp / "m"))
    if (e.path().extension() == ".safetensors" && (shard.empty() || e.path().string() < shard)) shard = e.path().string();
  std::string bytes = Slurp(shard);
  uint64_t hlen = 0;
  std::memcpy(&hlen, bytes.data(), 8);
  bytes[8 + hlen] = static_cast<char>(bytes[8 + hlen] ^ 1);  // the first data byte
  Spit(shard, bytes);
  const ModelIdentity c = IdentifyModel((tmp / "m").string());
  EXPECT_EQ(c.config_hash, a.config_hash);
  EXPECT_NE(c.layout_hash, a.layout_hash);
  fs::remove_all(tmp);
}

}  // namespace
}  // namespace k3::state
