#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>

#include "common/error.h"
#include "history.h"

namespace k3::tok {
namespace {

namespace fs = std::filesystem;

class HistoryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("k3_history_test_" + std::to_string(getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    path_ = (dir_ / "h.jsonl").string();
  }
  void TearDown() override { fs::remove_all(dir_); }
  void WriteRaw(const std::string& s) { std::ofstream(path_, std::ios::binary) << s; }
  std::string ReadRaw() {
    std::ifstream f(path_, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), {});
  }
  // Expects ReadHistory to fail with kExitBadInput and a message containing `needle`.
  void ExpectReject(const std::string& content, const std::string& needle) {
    WriteRaw(content);
    try {
      ReadHistory(path_);
      ADD_FAILURE() << "accepted: " << content;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), kExitBadInput);
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  }
  fs::path dir_;
  std::string path_;
};

const std::vector<ChatMessage> kTricky = {
    {Role::kSystem, "Be \"exact\" \\ careful", std::nullopt},
    {Role::kUser, "line1\nline2\r\n\ttab \x01\x1f\x7f caf\xc3\xa9 \xf0\x9f\x98\x80 <|end_of_msg|>", std::nullopt},
    {Role::kAssistant, "", std::string("thought\n")},
    {Role::kUser, "again", std::nullopt},
    {Role::kAssistant, "no reasoning", std::nullopt}};

TEST_F(HistoryTest, RoundTrip) {
  WriteHistory(path_, kTricky);
  EXPECT_EQ(ReadHistory(path_), kTricky);
  const std::string raw = ReadRaw();
  // Escapes: quote, backslash, \n \r \t, other controls as \u00XX; everything else raw.
  EXPECT_NE(raw.find("\\\"exact\\\" \\\\ careful"), std::string::npos);
  EXPECT_NE(raw.find("line1\\nline2\\r\\n\\ttab \\u0001\\u001f\x7f caf\xc3\xa9 \xf0\x9f\x98\x80"), std::string::npos);
  EXPECT_EQ(std::count(raw.begin(), raw.end(), '\n'), 5);
  EXPECT_EQ(raw.substr(0, raw.find('\n')), "{\"role\":\"system\",\"content\":\"Be \\\"exact\\\" \\\\ careful\"}");
}

// Tool calls and results (docs/tokenizer.md "History"): OpenAI's shape, round trip and refusals.
TEST_F(HistoryTest, ToolCallsAndResults) {
  const std::vector<ChatMessage> h = {
      {Role::kUser, "weather?", std::nullopt},
      {Role::kAssistant, "", std::string("look it up"), {{"c1", "get_weather", "{\"city\": \"Rome\"}"}, {"c2", "f", ""}}},
      {Role::kTool, "sunny", std::nullopt, {}, std::string("c2")},
      {Role::kTool, "{\"t\": 24}", std::nullopt, {}, std::string("c1")},
      {Role::kAssistant, "Sunny.", std::nullopt},
  };
  WriteHistory(path_, h);
  EXPECT_EQ(ReadHistory(path_), h);
  const std::string raw = ReadRaw();
  EXPECT_NE(raw.find("\"tool_calls\":[{\"id\":\"c1\",\"type\":\"function\",\"function\":{\"name\":\"get_weather\","
                     "\"arguments\":\"{\\\"city\\\": \\\"Rome\\\"}\"}}"),
            std::string::npos)
      << raw;
  EXPECT_NE(raw.find("{\"role\":\"tool\",\"content\":\"sunny\",\"tool_call_id\":\"c2\"}"), std::string::npos) << raw;
  const std::string u = "{\"role\":\"user\",\"content\":\"q\"}\n";
  const std::string a = "{\"role\":\"assistant\",\"content\":\"\",\"tool_calls\":[{\"id\":\"c1\",\"function\":{\"name\":\"f\"}}]}\n";
  auto reject = [&](const std::string& text, const std::string& says) {
    WriteRaw(text);
    try {
      ReadHistory(path_);
      ADD_FAILURE() << text;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
  };
  reject(u + "{\"role\":\"tool\",\"content\":\"r\",\"tool_call_id\":\"c1\"}\n", ":2: tool message must follow");
  reject(u + a + "{\"role\":\"tool\",\"content\":\"r\"}\n", "needs \"tool_call_id\"");
  reject(u + a + "{\"role\":\"tool\",\"content\":\"r\",\"tool_call_id\":\"c9\"}\n", "names no call");
  reject(u + a + "{\"role\":\"tool\",\"content\":\"r\",\"tool_call_id\":\"c1\"}\n{\"role\":\"tool\",\"content\":\"r\",\"tool_call_id\":\"c1\"}\n",
         "a second tool message");
  reject("{\"role\":\"user\",\"content\":\"q\",\"tool_calls\":[]}\n", "tool_calls on a non-assistant");
  reject(u + "{\"role\":\"assistant\",\"content\":\"\",\"tool_calls\":[{\"id\":\"c\",\"function\":{\"name\":\"f\",\"x\":1}}]}\n",
         "unknown key \"x\"");
  reject(u + "{\"role\":\"assistant\",\"content\":\"\",\"tool_calls\":[{\"id\":\"c\",\"function\":{}}]}\n", "needs function.name");
}

TEST_F(HistoryTest, AtomicRewriteLeavesNoTempFiles) {
  WriteHistory(path_, {kTricky[0]});
  WriteHistory(path_, kTricky);
  EXPECT_EQ(ReadHistory(path_), kTricky);
  size_t files = 0;
  for (const auto& e : fs::directory_iterator(dir_)) {
    (void)e;
    ++files;
  }
  EXPECT_EQ(files, 1u);
  // An invalid transcript is refused before the old file is touched.
  EXPECT_THROW(WriteHistory(path_, {kTricky[1], kTricky[0]}), Error);
  EXPECT_EQ(ReadHistory(path_), kTricky);
}

TEST_F(HistoryTest, AcceptsJsonEscapesAndSurrogatePairs) {
  WriteRaw("{\"content\": \"\\ud83d\\ude00 \\u00e9\\/\\b\\f\", \"role\": \"user\"}\n");
  const auto h = ReadHistory(path_);
  ASSERT_EQ(h.size(), 1u);
  EXPECT_EQ(h[0].content, "\xf0\x9f\x98\x80 \xc3\xa9/\b\f");
}

// JSON Lines: "\r\n" ends a line too (the \r is JSON whitespace), and JSON whitespace may
// sit between tokens.
TEST_F(HistoryTest, AcceptsCrlfAndJsonWhitespace) {
  WriteRaw("{\"role\":\"user\",\"content\":\"a\"}\r\n{ \"role\" :\r\"assistant\",\t\"content\":\"b\" }\r\n");
  const auto h = ReadHistory(path_);
  ASSERT_EQ(h.size(), 2u);
  EXPECT_EQ(h[1].content, "b");
}

TEST_F(HistoryTest, MissingFile) {
  EXPECT_TRUE(ReadHistory(path_, /*missing_ok=*/true).empty());
  EXPECT_THROW(ReadHistory(path_), Error);
}

TEST_F(HistoryTest, Rejections) {
  const std::string u = "{\"role\":\"user\",\"content\":\"hi\"}\n";
  const std::string a = "{\"role\":\"assistant\",\"content\":\"yo\"}\n";
  ExpectReject(u + "{\"role\":\"assistant\",\"content\":\"x\",\"extra\":1}\n", ":2: unknown key \"extra\"");
  ExpectReject("{\"role\":\"user\",\"content\":\"a\",\"content\":\"b\"}\n", ":1: duplicate key \"content\"");
  ExpectReject("{\"role\":\"user\",\"content\":\"a\"} x\n", ":1: invalid JSON: ");
  ExpectReject("{\"role\":\"user\",\"content\":\"a\"}{}\n", "expected end of input");
  ExpectReject(u + "\n" + a, ":2: blank line");
  ExpectReject("{\"role\":\"user\",\"content\":\"a\\u0000b\"}\n", "\\u0000");
  ExpectReject("{\"role\":\"user\",\"content\":\"\\ud83d\"}\n", "surrogate");
  ExpectReject("{\"role\":\"user\",\"content\":\"\\ude00\"}\n", "surrogate");
  ExpectReject("{\"role\":\"user\",\"content\":\"\\ud83d\\u0041\"}\n", "surrogate");
  ExpectReject("{\"role\":\"user\",\"content\":\"a\x01" "b\"}\n", "control character U+0001");
  ExpectReject("{\"role\":\"user\",\"content\":\"a\xff\"}\n", "ill-formed UTF-8");
  ExpectReject("{\"role\":\"user\",\"content\":5}\n", "\"content\" must be a string");
  ExpectReject("{\"role\":\"user\",\"content\":null}\n", "must be a string, not null");
  ExpectReject("{\"role\":\"bot\",\"content\":\"a\"}\n", "unknown role");
  ExpectReject("{\"role\":\"user\"}\n", "missing key \"content\"");
  ExpectReject("{\"content\":\"a\"}\n", "missing key \"role\"");
  ExpectReject("{\"role\":\"user\",\"content\":\"a\",\"reasoning_content\":\"r\"}\n", "reasoning_content");
  ExpectReject("[1]\n", "expected an object");
  ExpectReject("{\"role\":\"user\",\"content\":\"a\"\n", ":1: invalid JSON: ");
  ExpectReject("{\"role\":\"user\",\"content\":\"a\\q\"}\n", "forbidden character after backslash");
  ExpectReject(u + "{\"role\":\"system\",\"content\":\"s\"}\n", ":2: system message only allowed first");
  ExpectReject(a, ":1: assistant message must follow a user or tool message");
  ExpectReject(u + u, ":2: user message must follow an assistant or tool message");
  ExpectReject(u + a + a, ":3: assistant message must follow a user or tool message");
  ExpectReject("{\"role\":\"user\",\"content\":\"" + std::string(kMaxHistoryLine, 'x') + "\"}\n", "16 MiB");
}

TEST_F(HistoryTest, ErrorsNameThePathAndLine) {
  WriteRaw("{\"role\":\"user\",\"content\":\"hi\"}\n{\"role\":1}\n");
  try {
    ReadHistory(path_);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind(path_ + ":2: ", 0), 0u) << e.what();
  }
}

}  // namespace
}  // namespace k3::tok
