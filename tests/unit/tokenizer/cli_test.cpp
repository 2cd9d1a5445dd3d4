// Runs the real k3-tokenizer binary on a vocabulary written to a temp directory.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "common/error.h"
#include "test_vocab.h"

namespace k3::tok {
namespace {

namespace fs = std::filesystem;

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("k3_tok_cli_" + std::to_string(getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "vocab");
    Write("vocab/tiktoken.model", testing::TestModelText());
    Write("vocab/tokenizer_config.json", testing::TestConfigText());
  }
  void TearDown() override { fs::remove_all(dir_); }
  void Write(const std::string& name, const std::string& s) {
    fs::create_directories((dir_ / name).parent_path());
    std::ofstream(dir_ / name, std::ios::binary) << s;
  }
  std::string P(const std::string& name) { return (dir_ / name).string(); }
  // Runs the binary with `args`; returns the exit code, stdout in *out, stderr in *err.
  int Run(const std::string& args, std::string* out, std::string* err = nullptr) {
    const std::string cmd = std::string(K3_TOKENIZER_BIN) + " " + args + " >" + P("out") + " 2>" + P("err");
    const int st = std::system(cmd.c_str());
    auto slurp = [](const std::string& p) {
      std::ifstream f(p, std::ios::binary);
      return std::string(std::istreambuf_iterator<char>(f), {});
    };
    *out = slurp(P("out"));
    if (err) *err = slurp(P("err"));
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  }
  fs::path dir_;
};

TEST_F(CliTest, EncodeDecodeRoundTrip) {
  const std::string text = "hello world <|end_of_msg|> \xe4\xbd\xa0\xff\n";
  Write("in.txt", text);
  std::string out;
  ASSERT_EQ(Run("encode --vocab " + P("vocab") + " --file " + P("in.txt"), &out), 0);
  std::vector<uint32_t> want = testing::TestTokenizer().Encode(text, false);
  std::string want_text;
  for (size_t i = 0; i < want.size(); ++i) want_text += (i ? "," : "") + std::to_string(want[i]);
  EXPECT_EQ(out, want_text + "\n");
  ASSERT_EQ(Run("encode --vocab " + P("vocab") + " < " + P("in.txt"), &out), 0);  // stdin
  EXPECT_EQ(out, want_text + "\n");
  ASSERT_EQ(Run("decode --vocab " + P("vocab") + " --ids " + want_text, &out), 0);
  EXPECT_EQ(out, text);
}

// Fault 7 of issue 12: a repeated added-token id used to be accepted (nlohmann keeps the
// last). Every JSON input now goes through the strict parser: one line naming the file, exit 7.
TEST_F(CliTest, ConfigWithDuplicateIdKeyIsRefused) {
  const std::string n = std::to_string(testing::TestNumRanks());
  Write("vocab/tokenizer_config.json", "{\"added_tokens_decoder\": {\"" + n + "\": {\"content\": \"<a>\"}, \"" + n +
                                           "\": {\"content\": \"<b>\"}}}");
  Write("in.txt", "hi");
  std::string out, err;
  EXPECT_EQ(Run("encode --vocab " + P("vocab") + " --file " + P("in.txt"), &out, &err), kExitBadInput);
  EXPECT_EQ(out, "");
  EXPECT_EQ(err, "k3-tokenizer: " + P("vocab/tokenizer_config.json") + ": duplicate key \"" + n + "\"\n");
}

TEST_F(CliTest, ConfigWithBadUtf8OrTrailingDataIsRefused) {
  std::string out, err;
  for (const std::string& bad : {std::string("{\"added_tokens_decoder\": {}} x"),
                                 std::string("{\"added_tokens_decoder\": {}, \"k\": \"\xff\"}")}) {
    Write("vocab/tokenizer_config.json", bad);
    EXPECT_EQ(Run("encode --vocab " + P("vocab") + " --file " + P("vocab/tiktoken.model"), &out, &err), kExitBadInput);
    EXPECT_EQ(err.rfind("k3-tokenizer: " + P("vocab/tokenizer_config.json") + ": invalid JSON: ", 0), 0u) << err;
    EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
  }
}

// JSON Lines allows "\r\n" line ends (JSON whitespace); the old hand-written parser called
// the \r a raw control byte. Duplicate keys in a history line are refused with path:line.
TEST_F(CliTest, ChatHistoryGoesThroughTheStrictParser) {
  std::string out, crlf_out, err;
  Write("h.jsonl", "{\"role\":\"user\",\"content\":\"Hello\"}\n");
  ASSERT_EQ(Run("chat --vocab " + P("vocab") + " --history " + P("h.jsonl") + " --no-think", &out), 0);
  Write("crlf.jsonl", "{\"role\":\"user\",\"content\":\"Hello\"}\r\n");
  EXPECT_EQ(Run("chat --vocab " + P("vocab") + " --history " + P("crlf.jsonl") + " --no-think", &crlf_out, &err), 0)
      << err;
  EXPECT_EQ(crlf_out, out);
  Write("dup.jsonl", "{\"role\":\"user\",\"role\":\"user\",\"content\":\"Hello\"}\n");
  EXPECT_EQ(Run("chat --vocab " + P("vocab") + " --history " + P("dup.jsonl"), &out, &err), kExitBadInput);
  EXPECT_EQ(err, "k3-tokenizer: " + P("dup.jsonl") + ":1: duplicate key \"role\"\n");
}

TEST_F(CliTest, ChatRendersHistory) {
  Write("h.jsonl", "{\"role\":\"user\",\"content\":\"Hello\"}\n");
  std::string out, back;
  ASSERT_EQ(Run("chat --vocab " + P("vocab") + " --history " + P("h.jsonl") + " --no-think", &out), 0);
  out.pop_back();
  ASSERT_EQ(Run("decode --vocab " + P("vocab") + " --ids " + out, &back), 0);
  EXPECT_EQ(back,
            "<|open|>message role=\"user\"<|sep|>Hello<|close|>message<|sep|><|end_of_msg|>"
            "<|open|>message role=\"assistant\"<|sep|><|open|>response<|sep|>");
  ASSERT_EQ(Run("chat --vocab " + P("vocab") + " --history " + P("h.jsonl") + " --thinking-effort low", &out), 0);
  out.pop_back();
  ASSERT_EQ(Run("decode --vocab " + P("vocab") + " --ids " + out, &back), 0);
  EXPECT_NE(back.find("`thinking_effort=low`."), std::string::npos);
}

TEST_F(CliTest, ErrorsAreOneLineWithExitCodes) {
  std::string out, err;
  Write("bad/tiktoken.model", "!!!! 0\n");
  Write("bad/tokenizer_config.json", "{}");
  EXPECT_EQ(Run("encode --vocab " + P("bad") + " --file /dev/null", &out, &err), kExitBadInput);
  EXPECT_EQ(err, "k3-tokenizer: " + P("bad") + "/tiktoken.model:1: malformed base64\n");
  EXPECT_EQ(Run("decode --vocab " + P("vocab") + " --ids 1,,2", &out, &err), kExitUsage);
  EXPECT_EQ(Run("decode --vocab " + P("vocab") + " --ids 99999", &out, &err), kExitBadInput);
  EXPECT_EQ(err, "k3-tokenizer: unknown token id 99999 at position 0\n");
  EXPECT_EQ(Run("bogus", &out, &err), kExitUsage);
  Write("h.jsonl", "{\"role\":\"user\",\"content\":\"Hello\"}\n");
  EXPECT_EQ(Run("chat --vocab " + P("vocab") + " --history " + P("h.jsonl") + " --thinking-effort medium", &out, &err),
            kExitUsage);
  EXPECT_EQ(Run("chat --vocab " + P("vocab") + " --history " + P("h.jsonl") + " --no-think --thinking-effort low", &out,
                &err),
            kExitUsage);
  Write("h2.jsonl", "{\"role\":\"user\",\"content\":\"Hello\"}\n\n");
  EXPECT_EQ(Run("chat --vocab " + P("vocab") + " --history " + P("h2.jsonl"), &out, &err), kExitBadInput);
  EXPECT_EQ(err, "k3-tokenizer: " + P("h2.jsonl") + ":2: blank line\n");
}

}  // namespace
}  // namespace k3::tok
