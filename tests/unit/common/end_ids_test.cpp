// common/end_ids.h: config.json's eos_token_id (int or list) and the tokenizer's [EOS] and
// <|end_of_msg|> ids.
#include "common/end_ids.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <unistd.h>

#include "common/error.h"

namespace k3 {
namespace {

namespace fs = std::filesystem;

fs::path TempDir(const std::string& name) {
  const fs::path d = fs::temp_directory_path() / ("k3_end_ids_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

void Write(const fs::path& p, const std::string& text) {
  std::ofstream f(p);
  f << text;
}

ModelConfig Cfg(std::vector<int64_t> eos, int64_t vocab = 1000) {
  ModelConfig c;
  c.vocab_size = vocab;
  c.eos_token_ids = std::move(eos);
  return c;
}

TEST(EndIds, ConfigOnlyWithoutTokenizer) {
  EXPECT_EQ(DefaultEndIds(Cfg({7}), ""), (std::vector<int32_t>{7}));
  EXPECT_EQ(DefaultEndIds(Cfg({9, 7, 9}), ""), (std::vector<int32_t>{7, 9}));
  EXPECT_EQ(DefaultEndIds(Cfg({}), ""), (std::vector<int32_t>{}));
}

TEST(EndIds, TokenizerAddsEosAndEndOfMessage) {
  const fs::path d = TempDir("tok");
  Write(d / "tokenizer_config.json",
        R"({"added_tokens_decoder": {"900": {"content": "[BOS]"}, "901": {"content": "[EOS]"},
            "902": {"content": "<|end_of_msg|>"}, "903": {"content": "<|im_end|>"}},
            "eos_token": "[EOS]"})");
  EXPECT_EQ(DefaultEndIds(Cfg({902}), d.string()), (std::vector<int32_t>{901, 902}));
  EXPECT_EQ(DefaultEndIds(Cfg({5}), d.string()), (std::vector<int32_t>{5, 901, 902}));
  // Ids the model cannot emit are left out.
  EXPECT_EQ(DefaultEndIds(Cfg({5}, 902), d.string()), (std::vector<int32_t>{5, 901}));
  fs::remove_all(d);
}

TEST(EndIds, BadTokenizerConfigIsBadInput) {
  const fs::path d = TempDir("bad");
  try {
    DefaultEndIds(Cfg({1}), d.string());  // no file
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), kExitBadInput);
  }
  Write(d / "tokenizer_config.json", "{\"added_tokens_decoder\": {\"x1\": {\"content\": \"[EOS]\"}}}");
  try {
    DefaultEndIds(Cfg({1}), d.string());
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), kExitBadInput);
    EXPECT_NE(std::string(e.what()).find("x1"), std::string::npos);
  }
  fs::remove_all(d);
}

TEST(EndIds, MergeIdsSortsAndDedups) {
  EXPECT_EQ(MergeIds({5, 1}, {1, 3}), (std::vector<int32_t>{1, 3, 5}));
}

}  // namespace
}  // namespace k3
