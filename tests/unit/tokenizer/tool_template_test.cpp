// services/tokenizer/tool_template and the chat template's tool rendering. Expected strings are
// the ones docs/chat.md "Tool calls" cites: the oracle prompt of the official token ids (its
// tool declaration and tool-choice messages verbatim), the encoder's tools channel and tool
// result forms; the segmentation is the encoder's (each attribute piece its own text).
#include <gtest/gtest.h>

#include "chat_template.h"
#include "common/error.h"
#include "test_vocab.h"
#include "tool_template.h"

namespace k3::tok {
namespace {

using testing::TestTokenizer;
using Ids = std::vector<uint32_t>;

std::string Joined(const Segments& s) {
  std::string out;
  for (const Segment& x : s) out += x.text;
  return out;
}

const char* kWeatherTools =
    R"([{"type":"function","function":{"name":"get_weather","description":"Get current weather for a location",)"
    R"("parameters":{"type":"object","properties":{"location":{"type":"string","description":"City name"}},"required":["location"]}}}])";

TEST(ToolTemplate, DeclarationIsTheOraclesMessage) {
  EXPECT_EQ(Joined(ToolDeclaration(kWeatherTools)),
            "<|open|>message role=\"system\" type=\"tool-declare\"<|sep|># Tools\n"
            "Here are the available tools, described in JSONSchema.\n\n```json\n"
            "[{\"function\":{\"description\":\"Get current weather for a location\","
            "\"name\":\"get_weather\",\"parameters\":{\"properties\":{\"location\":"
            "{\"description\":\"City name\",\"type\":\"string\"}},\"required\":[\"location\"],"
            "\"type\":\"object\"}},\"type\":\"function\"}]\n```<|close|>message<|sep|><|end_of_msg|>");
  EXPECT_THROW(ToolDeclaration("{\"not\": \"an array\"}"), Error);
  EXPECT_THROW(ToolDeclaration("[oops"), Error);
}

TEST(ToolTemplate, TagsAreSegmentedAsTheEncoderDoes) {
  Segments s;
  OpenTag("call", {{"tool", "a\"b&c"}, {"index", "1"}}, &s);
  const Segments want = {{true, "<|open|>"}, {false, "call"},  {false, " tool"}, {false, "=\""}, {false, "a&quot;b&amp;c"},
                         {false, "\""},      {false, " index"}, {false, "=\""},   {false, "1"},   {false, "\""},
                         {true, "<|sep|>"}};
  EXPECT_EQ(s, want);
}

TEST(ToolTemplate, ToolChoiceMessages) {
  EXPECT_EQ(Joined(ToolChoiceMessage(ToolChoice::kRequired)),
            "<|open|>message role=\"system\" type=\"tool-choice\"<|sep|>The system is invoked with "
            "`tool_choice=required`.\nYou MUST call tools in the next message.<|close|>message<|sep|><|end_of_msg|>");
  EXPECT_EQ(Joined(ToolChoiceMessage(ToolChoice::kNamed)), Joined(ToolChoiceMessage(ToolChoice::kRequired)));
  EXPECT_EQ(Joined(ToolChoiceMessage(ToolChoice::kNone)),
            "<|open|>message role=\"system\" type=\"tool-choice\"<|sep|>The system is invoked with "
            "`tool_choice=none`.\nYou MUST NOT call any tools in the next message.<|close|>message<|sep|><|end_of_msg|>");
  EXPECT_TRUE(ToolChoiceMessage(ToolChoice::kAuto).empty());
}

TEST(ToolTemplate, CallsChannel) {
  const std::vector<ToolCall> calls = {
      {"c1", "get_weather", R"({"city": "Rome", "days": 1e2, "metric": true, "opts": {"timeout": 150, "tags": ["a", "b"]}, "x": null})"},
      {"c2", "search", "not json {"},
      {"c3", "search", "  "}};
  EXPECT_EQ(Joined(ToolsChannel(calls)),
            "<|open|>tools<|sep|>"
            "<|open|>call tool=\"get_weather\" index=\"1\"<|sep|>"
            "<|open|>argument key=\"city\" type=\"string\"<|sep|>Rome<|close|>argument<|sep|>"
            "<|open|>argument key=\"days\" type=\"number\"<|sep|>100.0<|close|>argument<|sep|>"
            "<|open|>argument key=\"metric\" type=\"boolean\"<|sep|>true<|close|>argument<|sep|>"
            "<|open|>argument key=\"opts\" type=\"object\"<|sep|>{\"timeout\": 150, \"tags\": [\"a\", \"b\"]}<|close|>argument<|sep|>"
            "<|open|>argument key=\"x\" type=\"null\"<|sep|>null<|close|>argument<|sep|>"
            "<|close|>call<|sep|>"
            "<|open|>call tool=\"search\" index=\"2\"<|sep|><|open|>json type=\"object\"<|sep|>not json {<|close|>json<|sep|><|close|>call<|sep|>"
            "<|open|>call tool=\"search\" index=\"3\"<|sep|><|close|>call<|sep|>"
            "<|close|>tools<|sep|>");
  EXPECT_THROW(ToolsChannel({{"c", "f", "[1, 2]"}}), Error);
}

// A forced call opens as the channel of one call whose arguments are a json block: the same
// segments as that rendering, up to the block's text.
TEST(ToolTemplate, ForcedCallOpeningIsTheJsonBlocksStart) {
  EXPECT_EQ(Joined(ForcedCallOpening("get_weather")),
            "<|open|>tools<|sep|><|open|>call tool=\"get_weather\" index=\"1\"<|sep|><|open|>json type=\"object\"<|sep|>");
  const Segments whole = ToolsChannel({{"c", "a&\"b", "RAW"}});
  const Segments open = ForcedCallOpening("a&\"b");
  ASSERT_LT(open.size(), whole.size());
  EXPECT_EQ(open, Segments(whole.begin(), whole.begin() + static_cast<std::ptrdiff_t>(open.size())));
  EXPECT_EQ(whole[open.size()].text, "RAW");
}

// Segments -> ids the plain way: control through Encode(allow_special), text ordinary.
Ids IdsOf(const Segments& segs) {
  Ids out;
  for (const Segment& s : segs) {
    const Ids ids = TestTokenizer().Encode(s.text, s.control);
    out.insert(out.end(), ids.begin(), ids.end());
  }
  return out;
}
Segments C(const std::string& s) { return {{true, s}}; }
Segments T(const std::string& s) { return {{false, s}}; }
Segments Cat(std::initializer_list<Segments> parts) {
  Segments out;
  for (const Segments& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}
Segments Msg(const Attrs& a, const std::string& body) {
  Segments s;
  Message(a, body, &s);
  return s;
}

TEST(ToolTemplate, AConversationWithCallsAndResults) {
  const ChatTemplate t(TestTokenizer());
  // The results come in another order than the calls: they are rendered in the calls' order.
  const std::vector<ChatMessage> h = {
      {Role::kUser, "Weather in Rome and Oslo?", std::nullopt},
      {Role::kAssistant, "", std::string("two lookups"),
       {{"id_r", "get_weather", R"({"location":"Rome"})"}, {"id_o", "get_weather", R"({"location":"Oslo"})"}}},
      {Role::kTool, "cold", std::nullopt, {}, std::string("id_o")},
      {Role::kTool, "sunny", std::nullopt, {}, std::string("id_r")}};
  ChatOptions opt{true, "low"};
  opt.tools_json = kWeatherTools;
  opt.tool_choice = ToolChoice::kRequired;
  const Segments want = Cat({
      ToolDeclaration(kWeatherTools),
      C("<|open|>message role=\"system\" type=\"thinking-effort\"<|sep|>"), T(ThinkingEffortText("low")),
      C("<|close|>message<|sep|><|end_of_msg|>"),
      C("<|open|>message role=\"user\"<|sep|>"), T("Weather in Rome and Oslo?"), C("<|close|>message<|sep|><|end_of_msg|>"),
      C("<|open|>message role=\"assistant\"<|sep|><|open|>think<|sep|>"), T("two lookups"),
      C("<|close|>think<|sep|><|open|>response<|sep|><|close|>response<|sep|>"),
      ToolsChannel({{"id_r", "get_weather", R"({"location":"Rome"})"}, {"id_o", "get_weather", R"({"location":"Oslo"})"}}),
      C("<|close|>message<|sep|><|end_of_msg|>"),
      Msg({{"role", "tool"}, {"tool", "get_weather"}, {"index", "1"}}, "sunny"),
      Msg({{"role", "tool"}, {"tool", "get_weather"}, {"index", "2"}}, "cold"),
      ToolChoiceMessage(ToolChoice::kRequired),
      C("<|open|>message role=\"assistant\"<|sep|><|open|>think<|sep|>")});
  EXPECT_EQ(t.Render(h, opt), IdsOf(want));
}

TEST(ToolTemplate, TheConversationsToolRules) {
  const ChatTemplate t(TestTokenizer());
  const ChatMessage u{Role::kUser, "q", std::nullopt};
  const ChatMessage a{Role::kAssistant, "", std::nullopt, {{"id1", "f", "{}"}}};
  const ChatMessage plain{Role::kAssistant, "a", std::nullopt};
  auto tool = [](const char* id) { return ChatMessage{Role::kTool, "r", std::nullopt, {}, std::string(id)}; };
  EXPECT_NO_THROW(t.Render({u, a, tool("id1")}, ChatOptions{}));
  EXPECT_NO_THROW(t.Render({u, a, tool("id1"), plain, u}, ChatOptions{}));
  EXPECT_THROW(t.Render({u, a, tool("nope")}, ChatOptions{}), Error);             // answers no call
  EXPECT_THROW(t.Render({u, a, tool("id1"), tool("id1")}, ChatOptions{}), Error);  // answered twice
  EXPECT_THROW(t.Render({u, plain, tool("id1")}, ChatOptions{}), Error);          // no calls before it
  EXPECT_THROW(t.Render({u, tool("id1")}, ChatOptions{}), Error);
  EXPECT_THROW(t.Render({u, a}, ChatOptions{}), Error);  // a generation prompt after an assistant message
}

}  // namespace
}  // namespace k3::tok
