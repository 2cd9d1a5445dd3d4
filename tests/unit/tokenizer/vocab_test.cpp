#include <gtest/gtest.h>

#include "common/error.h"
#include "test_vocab.h"

namespace k3::tok {
namespace {

using testing::TestConfigText;
using testing::TestModelText;
using testing::TestNumRanks;

// Expects Parse to throw kExitBadInput whose message contains `needle`.
void ExpectBad(const std::string& model, const std::string& config, const std::string& needle) {
  try {
    Vocab::Parse(model, config, "tiktoken.model", "tokenizer_config.json");
    FAIL() << "accepted; wanted error containing " << needle;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), kExitBadInput);
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << "one line";
  }
}

TEST(Vocab, LoadsRanksAndAddedTokens) {
  const Vocab v = Vocab::Parse(TestModelText(), TestConfigText(), "m", "c");
  EXPECT_EQ(v.num_ranks(), TestNumRanks());
  EXPECT_EQ(v.ranks().Find("hello"), 256u + 6);
  EXPECT_EQ(v.AddedId("<|end_of_msg|>"), TestNumRanks() + 2);
  EXPECT_EQ(v.AddedId("[PAD]"), TestNumRanks() + 255);
  EXPECT_EQ(v.id_limit(), TestNumRanks() + 256);
  std::string_view b;
  ASSERT_TRUE(v.IdBytes(TestNumRanks() + 3, &b));
  EXPECT_EQ(b, "<|open|>");
  EXPECT_FALSE(v.IdBytes(TestNumRanks() + 100, &b));  // reserved gap, not in the config
  EXPECT_FALSE(v.IdBytes(v.id_limit(), &b));
}

TEST(Vocab, AcceptsCrlfAndBlankLines) {
  std::string m;
  for (char c : TestModelText()) {
    if (c == '\n') m += "\r\n";
    else m += c;
  }
  m = "\n" + m + "\n\n";
  EXPECT_EQ(Vocab::Parse(m, TestConfigText(), "m", "c").num_ranks(), TestNumRanks());
}

TEST(Vocab, RejectsMalformedBase64NamingTheLine) {
  std::string m = TestModelText();
  m.replace(m.find("YWI="), 4, "YW!=");  // "ab" on line 257
  ExpectBad(m, TestConfigText(), "tiktoken.model:257: malformed base64");
}

TEST(Vocab, RejectsBadRankText) {
  ExpectBad(TestModelText() + "Zm9v x\n", TestConfigText(), "malformed rank");
  ExpectBad(TestModelText() + "Zm9v 0293\n", TestConfigText(), "malformed rank");
  ExpectBad(TestModelText() + "Zm9v\n", TestConfigText(), "expected \"base64 rank\"");
  ExpectBad(TestModelText() + "Zm9v 1 2\n", TestConfigText(), "expected \"base64 rank\"");
}

TEST(Vocab, RejectsDuplicateRank) {
  ExpectBad(TestModelText() + "Zm9v 5\n", TestConfigText(), "duplicate rank 5 (first on line 6)");
}

TEST(Vocab, RejectsMissingRank) {
  ExpectBad(TestModelText() + "Zm9v " + std::to_string(TestNumRanks() + 1) + "\n", TestConfigText(),
            "missing rank " + std::to_string(TestNumRanks()));
}

TEST(Vocab, RejectsDuplicateTokenBytes) {
  ExpectBad(TestModelText() + "YWI= " + std::to_string(TestNumRanks()) + "\n", TestConfigText(),
            "duplicate those of rank 256");
}

TEST(Vocab, RejectsMissingSingleByte) {
  std::string m;
  for (int b = 1; b < 256; ++b) m += Base64Encode(std::string(1, static_cast<char>(b))) + " " + std::to_string(b - 1) + "\n";
  ExpectBad(m, "{\"added_tokens_decoder\":{}}", "no token for byte 0");
}

TEST(Vocab, RejectsBadConfig) {
  ExpectBad(TestModelText(), "{\"added_tokens_decoder\": {", "tokenizer_config.json: invalid JSON");
  ExpectBad(TestModelText(), "{\n\"added_tokens_decoder\": {,}}", "line 2");
  ExpectBad(TestModelText(), "{}", "missing object \"added_tokens_decoder\"");
  ExpectBad(TestModelText(), "{\"added_tokens_decoder\": {\"7\": {\"content\": \"<x>\"}}}",
            "id collides with BPE rank");
  ExpectBad(TestModelText(), "{\"added_tokens_decoder\": {\"abc\": {\"content\": \"<x>\"}}}", "not a decimal id");
  const std::string n = std::to_string(TestNumRanks());
  const std::string n1 = std::to_string(TestNumRanks() + 1);
  ExpectBad(TestModelText(), "{\"added_tokens_decoder\": {\"" + n + "\": {\"special\": true}}}", "string \"content\"");
  ExpectBad(TestModelText(), "{\"added_tokens_decoder\": {\"" + n + "\": {\"content\": \"\"}}}", "empty content");
  ExpectBad(TestModelText(),
            "{\"added_tokens_decoder\": {\"" + n + "\": {\"content\": \"<a>\"}, \"" + n1 + "\": {\"content\": \"<a>\"}}}",
            "share content");
  // A repeated id key: nlohmann alone would keep the last silently.
  ExpectBad(TestModelText(),
            "{\"added_tokens_decoder\": {\"" + n + "\": {\"content\": \"<a>\"}, \"" + n + "\": {\"content\": \"<b>\"}}}",
            "tokenizer_config.json: duplicate key \"" + n + "\"");
  ExpectBad(TestModelText(), "{\"added_tokens_decoder\": {}, \"added_tokens_decoder\": {}}", "duplicate key");
}

TEST(Vocab, LoadFromMissingDirectory) {
  try {
    Vocab::Load("/nonexistent-k3-dir");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), kExitBadInput);
    EXPECT_NE(std::string(e.what()).find("/nonexistent-k3-dir/tiktoken.model: cannot open"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace k3::tok
