// services/server/tool_calls: the model's tools channel -> calls, on hand-written XTML (the
// grammar of docs/chat.md "Tool calls"); expected arguments are written out by hand.
#include "services/server/tool_calls.h"

#include <gtest/gtest.h>

#include <map>

namespace k3::server {
namespace {
using Kind = XtmlPiece::Kind;
using ipc::tokenizer::ToolChoice;

// "<|open|>", "<|close|>" and "<|sep|>" in `s` become control pieces, the rest text pieces.
std::vector<XtmlPiece> X(const std::string& s) {
  std::vector<XtmlPiece> out;
  size_t i = 0;
  while (i < s.size()) {
    const std::pair<const char*, Kind> marks[] = {{"<|open|>", Kind::kOpen}, {"<|close|>", Kind::kClose}, {"<|sep|>", Kind::kSep}};
    bool mark = false;
    for (const auto& [m, k] : marks)
      if (s.compare(i, std::string(m).size(), m) == 0) {
        out.push_back({k, ""});
        i += std::string(m).size();
        mark = true;
        break;
      }
    if (mark) continue;
    if (out.empty() || out.back().kind != Kind::kText) out.push_back({Kind::kText, ""});
    out.back().text += s[i++];
  }
  return out;
}

ToolRules Rules(std::vector<std::string> declared = {"get_weather", "search"}) {
  ToolRules r;
  r.declared = std::move(declared);
  return r;
}

const std::string kEnd = "<|close|>tools<|sep|>";
std::string Call(const std::string& tool, int index, const std::string& args) {
  return "<|open|>call tool=\"" + tool + "\" index=\"" + std::to_string(index) + "\"<|sep|>" + args + "<|close|>call<|sep|>";
}
std::string Arg(const std::string& key, const std::string& type, const std::string& value) {
  return "<|open|>argument key=\"" + key + "\" type=\"" + type + "\"<|sep|>" + value + "<|close|>argument<|sep|>";
}

TEST(ToolCalls, TypedArgumentsBecomeOneJsonObjectInTheirOrder) {
  const auto r = ParseToolCalls(
      X(Call("get_weather", 1,
             Arg("city", "string", "São Paulo \"SP\"") + Arg("days", "number", "3") + Arg("metric", "boolean", "true") +
                 Arg("opts", "object", "{\"timeout\": 150, \"z\": [1, null]}") + Arg("none", "null", "null")) +
        kEnd),
      Rules(), true);
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_TRUE(r.problems.empty());
  EXPECT_TRUE(r.closed);
  EXPECT_EQ(r.calls[0].name, "get_weather");
  EXPECT_EQ(r.calls[0].Arguments(),
            "{\"city\":\"São Paulo \\\"SP\\\"\",\"days\":3,\"metric\":true,\"opts\":{\"timeout\":150,\"z\":[1,null]},\"none\":null}");
  EXPECT_EQ(r.calls[0].fragments,
            (std::vector<std::string>{"{\"city\":\"São Paulo \\\"SP\\\"\"", ",\"days\":3", ",\"metric\":true",
                                      ",\"opts\":{\"timeout\":150,\"z\":[1,null]}", ",\"none\":null", "}"}));
}

TEST(ToolCalls, SeveralCallsAJsonBlockAndNoArguments) {
  const auto r = ParseToolCalls(X(Call("search", 1, Arg("q", "string", "k3")) +
                                  Call("get_weather", 2, "<|open|>json type=\"object\"<|sep|> {\"b\": 1, \"a\": \"x\"} <|close|>json<|sep|>") +
                                  Call("search", 3, "") + kEnd),
                                Rules(), true);
  ASSERT_EQ(r.calls.size(), 3u);
  EXPECT_TRUE(r.problems.empty());
  EXPECT_EQ(r.calls[0].Arguments(), "{\"q\":\"k3\"}");
  EXPECT_EQ(r.calls[1].Arguments(), "{\"b\":1,\"a\":\"x\"}");
  EXPECT_EQ(r.calls[2].Arguments(), "{}");
  EXPECT_EQ(r.calls[2].fragments, std::vector<std::string>{"{}"});
}

TEST(ToolCalls, AttributeValuesAreUnescapedAndAStringArgumentMayBeEmpty) {
  const auto r = ParseToolCalls(X(Call("search", 1, Arg("a&amp;b &quot;q&quot;", "string", "")) + kEnd), Rules(), true);
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].Arguments(), "{\"a&b \\\"q\\\"\":\"\"}");
}

TEST(ToolCalls, TextThatSpellsTheControlTokensIsText) {
  // The model wrote the characters "<|close|>argument<|sep|>" as ordinary tokens: one text piece.
  std::vector<XtmlPiece> p = X(Call("search", 1, Arg("q", "string", "PLACEHOLDER")) + kEnd);
  for (XtmlPiece& x : p)
    if (x.text == "PLACEHOLDER") x.text = "a<|close|>argument<|sep|>b";
  const auto r = ParseToolCalls(p, Rules(), true);
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].Arguments(), "{\"q\":\"a<|close|>argument<|sep|>b\"}");
}

struct Malformed {
  const char* name;
  std::string call;
  const char* error_part;
};

TEST(ToolCalls, MalformedCallsAreReportedWithTheirTextAndTheOthersKept) {
  const Malformed cases[] = {
      {"unknown tool", Call("rm_rf", 1, ""), "not declared"},
      {"bad json", Call("search", 1, Arg("n", "number", "3,")), "not JSON"},
      {"type mismatch", Call("search", 1, Arg("n", "number", "\"3\"")), "declared number but is string"},
      {"unknown type", Call("search", 1, Arg("n", "integer", "3")), "declared integer"},
      {"duplicate key", Call("search", 1, Arg("q", "string", "a") + Arg("q", "string", "b")), "twice"},
      {"missing index", "<|open|>call tool=\"search\"<|sep|><|close|>call<|sep|>", "attributes index and tool"},
      {"extra attribute", "<|open|>call tool=\"search\" index=\"1\" x=\"y\"<|sep|><|close|>call<|sep|>", "attributes"},
      {"zero index", Call("search", 0, ""), "positive"},
      {"unquoted attribute", "<|open|>call tool=search index=\"1\"<|sep|><|close|>call<|sep|>", "malformed attributes"},
      {"not a call", "<|open|>invoke tool=\"search\" index=\"1\"<|sep|><|close|>call<|sep|>", "where a call should be"},
      {"nested element", Call("search", 1, "<|open|>argument key=\"q\" type=\"string\"<|sep|>a" + Arg("r", "string", "b") + "<|close|>argument<|sep|>"),
       "not closed"},
      {"wrong close", Call("search", 1, "<|open|>argument key=\"q\" type=\"string\"<|sep|>a<|close|>json<|sep|>"), "not closed"},
      {"json after arguments", Call("search", 1, Arg("q", "string", "a") + "<|open|>json type=\"object\"<|sep|>{}<|close|>json<|sep|>"),
       "after arguments"},
      {"json not an object", Call("search", 1, "<|open|>json type=\"object\"<|sep|>[1]<|close|>json<|sep|>"), "not an object"},
      {"text between arguments", Call("search", 1, Arg("q", "string", "a") + "\n" + Arg("r", "string", "b")), "text or a closing tag"},
      {"bad utf-8", Call("search", 1, Arg("q", "string", "\xff\xfe")), "not valid UTF-8"},
  };
  for (const Malformed& m : cases) {
    const std::string good = Call("get_weather", 2, Arg("city", "string", "Rome"));
    const auto r = ParseToolCalls(X(m.call + good + kEnd), Rules(), true);
    ASSERT_EQ(r.problems.size(), 1u) << m.name;
    EXPECT_NE(r.problems[0].error.find(m.error_part), std::string::npos) << m.name << ": " << r.problems[0].error;
    EXPECT_EQ(r.problems[0].raw, m.call) << m.name;
    ASSERT_EQ(r.calls.size(), 1u) << m.name;
    EXPECT_EQ(r.calls[0].Arguments(), "{\"city\":\"Rome\"}") << m.name;
  }
}

TEST(ToolCalls, AnUnfinishedCallWaitsUntilTheReplyEnds) {
  const std::string done = Call("search", 1, Arg("q", "string", "a"));
  const std::string part = "<|open|>call tool=\"search\" index=\"2\"<|sep|><|open|>argument key=\"q\"";
  const auto going = ParseToolCalls(X(done + part), Rules(), false);
  EXPECT_EQ(going.calls.size(), 1u);
  EXPECT_TRUE(going.problems.empty());
  EXPECT_FALSE(going.closed);
  const auto ended = ParseToolCalls(X(done + part), Rules(), true);
  EXPECT_EQ(ended.calls.size(), 1u);
  ASSERT_EQ(ended.problems.size(), 1u);
  EXPECT_EQ(ended.problems[0].raw, part);
  // The channel's closing tag in arrival: nothing to say yet.
  EXPECT_TRUE(ParseToolCalls(X(done + "<|close|>too"), Rules(), false).problems.empty());
  const auto unclosed = ParseToolCalls(X(done), Rules(), true);
  ASSERT_EQ(unclosed.problems.size(), 1u);
  EXPECT_NE(unclosed.problems[0].error.find("not closed"), std::string::npos);
}

TEST(ToolCalls, StrayTextAndPiecesAfterTheEnd) {
  const auto r = ParseToolCalls(X("thinking aloud" + Call("search", 1, "") + kEnd + "more"), Rules(), true);
  EXPECT_EQ(r.calls.size(), 1u);
  ASSERT_EQ(r.problems.size(), 2u);
  EXPECT_EQ(r.problems[0].raw, "thinking aloud");
  EXPECT_EQ(r.problems[1].raw, "more");
}

TEST(ToolCalls, TheRequestsRules) {
  const std::string two = Call("search", 1, "") + Call("get_weather", 2, "") + kEnd;
  ToolRules none = Rules();
  none.choice = ToolChoice::kNone;
  auto r = ParseToolCalls(X(two), none, true);
  EXPECT_TRUE(r.calls.empty());
  ASSERT_EQ(r.problems.size(), 2u);
  EXPECT_NE(r.problems[0].error.find("\"none\""), std::string::npos);

  ToolRules named = Rules();
  named.choice = ToolChoice::kNamed;
  named.named = "get_weather";
  r = ParseToolCalls(X(two), named, true);
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].name, "get_weather");
  ASSERT_EQ(r.problems.size(), 1u);
  EXPECT_NE(r.problems[0].error.find("names the function \"get_weather\""), std::string::npos);

  ToolRules one = Rules();
  one.parallel = false;
  r = ParseToolCalls(X(two), one, true);
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].name, "search");
  ASSERT_EQ(r.problems.size(), 1u);
  EXPECT_NE(r.problems[0].error.find("parallel_tool_calls"), std::string::npos);
}

TEST(ToolCalls, PiecesFromIds) {
  ChatControlIds c;
  c.open = 100;
  c.close = 101;
  c.sep = 102;
  const std::map<int32_t, std::string> bytes = {{1, "call"}, {2, " tool=\""}, {3, "s\""}, {100, "<|open|>"}, {102, "<|sep|>"}};
  const auto p = XtmlPieces({100, 1, 2, 3, 102, 101, 1, 102}, c, [&](int32_t id) -> const std::string& { return bytes.at(id); });
  const std::vector<XtmlPiece> want = {{Kind::kOpen, ""}, {Kind::kText, "call tool=\"s\""}, {Kind::kSep, ""},
                                       {Kind::kClose, ""}, {Kind::kText, "call"}, {Kind::kSep, ""}};
  EXPECT_EQ(p, want);
  EXPECT_EQ(XtmlText(p, 0, p.size()), "<|open|>call tool=\"s\"<|sep|><|close|>call<|sep|>");
}

TEST(ToolCalls, TheSchemasAForcedCallMustSatisfy) {
  const nlohmann::ordered_json tools = nlohmann::ordered_json::parse(
      R"([{"type":"function","function":{"name":"a","parameters":{"type":"object","properties":{"x":{"type":"string"}}}}},)"
      R"({"type":"function","function":{"name":"b","strict":true}}])");
  ToolRules r = Rules({"a", "b"});
  EXPECT_TRUE(ForcedCallSchemas(tools, r).empty());  // auto: nothing forced
  r.choice = ToolChoice::kNamed;
  r.named = "b";
  auto f = ForcedCallSchemas(tools, r);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].name, "b");
  EXPECT_EQ(f[0].parameters, nlohmann::ordered_json::parse(R"({"type":"object","properties":{}})"));
  EXPECT_EQ(f[0].index, 1u);
  EXPECT_TRUE(f[0].strict);
  r.choice = ToolChoice::kRequired;
  f = ForcedCallSchemas(tools, r);
  ASSERT_EQ(f.size(), 2u);
  EXPECT_EQ(f[0].parameters, nlohmann::ordered_json::parse(R"({"type":"object","properties":{"x":{"type":"string"}}})"));
  EXPECT_FALSE(f[0].strict);
}

}  // namespace
}  // namespace k3::server
