// The chat's pure input and settings parts: /set (launcher/chat_settings.h), the input
// history file and pasted text (launcher/input_history.h), and --connect's requests, event
// stream and failures (launcher/remote_api.h). Expected values are written from docs/chat.md,
// docs/sampling.md and docs/server.md, not from the code.
#include <gtest/gtest.h>

#include "launcher/chat_settings.h"
#include "launcher/input_history.h"
#include "launcher/remote_api.h"

namespace k3::launch {
namespace {

TEST(ChatSet, ChangesOneSettingAndChecksItLikeItsFlag) {
  ChatSettings s;
  EXPECT_EQ(ApplySet(s, "temperature 0.7"), "");
  EXPECT_FLOAT_EQ(s.sampling.temperature, 0.7f);
  EXPECT_EQ(ApplySet(s, "top-p  0.9 "), "");  // the flag's spelling too; spaces around the value
  EXPECT_FLOAT_EQ(s.sampling.top_p, 0.9f);
  EXPECT_EQ(ApplySet(s, "top_k 40"), "");
  EXPECT_EQ(s.sampling.top_k, 40);
  EXPECT_EQ(ApplySet(s, "seed 18446744073709551615"), "");
  EXPECT_EQ(s.sampling.seed, 18446744073709551615ull);
  EXPECT_EQ(ApplySet(s, "repeat_last_n -1"), "");
  EXPECT_EQ(s.sampling.repeat_last_n, -1);

  const ChatSettings before = s;
  // docs/sampling.md: top_p in (0, 1], temperature >= 0, penalties in [-2, 2].
  EXPECT_EQ(ApplySet(s, "top_p 1.5"), "/set: --top-p 1.5: must be in (0, 1] (1 = off)");
  EXPECT_NE(ApplySet(s, "temperature -1"), "");
  EXPECT_NE(ApplySet(s, "presence_penalty 2.5"), "");
  EXPECT_NE(ApplySet(s, "top_k 4.5"), "");     // not an integer
  EXPECT_NE(ApplySet(s, "temperature 0.7x"), "");
  EXPECT_NE(ApplySet(s, "temperature nan"), "");
  EXPECT_NE(ApplySet(s, "seed -1"), "");
  EXPECT_NE(ApplySet(s, "temperature"), "");   // no value
  EXPECT_NE(ApplySet(s, "temperature 1 2"), "");
  EXPECT_EQ(ApplySet(s, "warmth 3").rfind("/set: unknown key 'warmth'", 0), 0u);
  EXPECT_EQ(s.sampling, before.sampling);  // a refused /set changes nothing
}

TEST(ChatSet, ThinkingAndEffort) {
  ChatSettings s;
  EXPECT_EQ(ApplySet(s, "think off"), "");
  EXPECT_FALSE(s.thinking);
  EXPECT_EQ(SettingsText(s).find("effort"), std::string::npos);  // no effort shown with thinking off
  EXPECT_EQ(ApplySet(s, "effort low"), "");  // an effort means thinking, as --thinking-effort excludes --no-think
  EXPECT_TRUE(s.thinking);
  EXPECT_EQ(s.effort, "low");
  EXPECT_EQ(ApplySet(s, "effort medium"), "/set effort medium: want low, high or max");
  EXPECT_EQ(ApplySet(s, "think maybe"), "/set think maybe: want on or off");
  EXPECT_EQ(s.effort, "low");
  s.sampling.temperature = 0.5f;
  s.sampling.seed = 7;
  const std::string t = SettingsText(s);
  EXPECT_NE(t.find("temperature 0.5"), std::string::npos) << t;
  EXPECT_NE(t.find("seed 7"), std::string::npos) << t;
  EXPECT_NE(t.find("think on  effort low"), std::string::npos) << t;
  EXPECT_NE(ChatHelp(true).find("/save"), std::string::npos);
  EXPECT_EQ(ChatHelp(false).find("/save"), std::string::npos);  // --connect has no compute state to save
  EXPECT_NE(ChatHelp(false).find("/set"), std::string::npos);
}

TEST(InputHistory, JsonStringsOnePerLineNewestKept) {
  const std::string text = "\"hello\"\n\"two\\nlines\"\n\n\"caf\xc3\xa9\"\n";
  const InputHistory h = ParseInputHistory(text);
  ASSERT_FALSE(h.bad_line);
  EXPECT_EQ(h.entries, (std::vector<std::string>{"hello", "two\nlines", "caf\xc3\xa9"}));
  EXPECT_EQ(InputHistoryText(h.entries), "\"hello\"\n\"two\\nlines\"\n\"caf\xc3\xa9\"\n");
  EXPECT_EQ(InputHistoryText({"a", "b", "c"}, 2), "\"b\"\n\"c\"\n");
  EXPECT_EQ(InputHistoryText({"\xff"}), "\"\xef\xbf\xbd\"\n");  // ill-formed UTF-8: U+FFFD
  const InputHistory bad = ParseInputHistory("\"ok\"\nnot json\n");
  EXPECT_EQ(bad.bad_line, 2u);
  EXPECT_TRUE(bad.entries.empty());
  EXPECT_EQ(ParseInputHistory("{\"role\": \"user\"}\n").bad_line, 1u);  // a conversation's JSONL is not ours
}

TEST(InputHistory, WhereTheFileIs) {
  EXPECT_EQ(DefaultInputHistoryPath("/x/state", "/home/u"), "/x/state/k3/chat-input-history.jsonl");
  EXPECT_EQ(DefaultInputHistoryPath("relative", "/home/u"), "/home/u/.local/state/k3/chat-input-history.jsonl");
  EXPECT_EQ(DefaultInputHistoryPath(nullptr, "/home/u"), "/home/u/.local/state/k3/chat-input-history.jsonl");
  EXPECT_EQ(DefaultInputHistoryPath(nullptr, nullptr), "");
  EXPECT_EQ(InputHistoryFile("off", "/x", "/h"), "");
  EXPECT_EQ(InputHistoryFile("", "/x", "/h"), "/x/k3/chat-input-history.jsonl");
  EXPECT_EQ(InputHistoryFile("/tmp/h.jsonl", "/x", "/h"), "/tmp/h.jsonl");
}

TEST(InputHistory, PastedLineEnds) {
  EXPECT_EQ(PastedText("a\rb\r\nc\nd"), "a\nb\nc\nd");
  EXPECT_EQ(PastedText("end\r"), "end\n");
  EXPECT_EQ(PastedText(""), "");
}

TEST(Connect, ServerUrl) {
  auto u = ParseServerUrl("http://127.0.0.1:8080");
  ASSERT_TRUE(u);
  EXPECT_EQ(u->host, "127.0.0.1");
  EXPECT_EQ(u->port, 8080);
  EXPECT_EQ(u->prefix, "");
  u = ParseServerUrl("http://localhost:9/v1/");  // an OpenAI base URL works too
  ASSERT_TRUE(u);
  EXPECT_EQ(u->port, 9);
  EXPECT_EQ(u->prefix, "");
  u = ParseServerUrl("http://[::1]:8080/k3");
  ASSERT_TRUE(u);
  EXPECT_EQ(u->host, "::1");
  EXPECT_EQ(u->prefix, "/k3");
  u = ParseServerUrl("http://example.org");
  ASSERT_TRUE(u);
  EXPECT_EQ(u->port, 80);
  for (const char* bad : {"127.0.0.1:8080", "https://h:1", "http://:80", "http://h:0", "http://h:65536", "http://h:",
                          "http://h:8x", "http://u:p@h:1", "http://::1:80", "http://h:1/?q"}) {
    std::string why;
    EXPECT_FALSE(ParseServerUrl(bad, &why)) << bad;
    EXPECT_FALSE(why.empty()) << bad;
  }
  EXPECT_EQ(ServerUrlProblem("https://h:1").rfind("'https://h:1': https is not spoken", 0), 0u);
}

TEST(Connect, ChatRequestCarriesTheSessionsSettings) {
  ChatSettings s;
  s.sampling.temperature = 0.5f;
  s.sampling.seed = 42;
  s.effort = "low";
  const std::vector<ChatMessage> history = {
      {"system", "Be brief.", std::nullopt}, {"user", "Hi", std::nullopt}, {"assistant", "Hello", "greet"}, {"user", "Bye", std::nullopt}};
  nlohmann::json r = ChatRequest("k3-demo-tiny", history, s, 0, {}, false);
  EXPECT_EQ(r["model"], "k3-demo-tiny");
  ASSERT_EQ(r["messages"].size(), 4u);
  EXPECT_EQ(r["messages"][2], nlohmann::json({{"role", "assistant"}, {"content", "Hello"}, {"reasoning_content", "greet"}}));
  EXPECT_EQ(r["messages"][3], nlohmann::json({{"role", "user"}, {"content", "Bye"}}));
  EXPECT_EQ(r["reasoning_effort"], "low");
  EXPECT_FLOAT_EQ(r["temperature"].get<float>(), 0.5f);
  EXPECT_EQ(r["seed"], 42u);
  EXPECT_EQ(r["stream"], true);
  EXPECT_EQ(r["stream_options"]["include_usage"], true);
  EXPECT_EQ(r["return_token_ids"], true);
  EXPECT_FALSE(r.contains("max_completion_tokens"));  // no reply limit: the reply runs to its end
  EXPECT_FALSE(r.contains("stop"));
  s.thinking = false;
  r = ChatRequest("m", history, s, 300, {"\n\n"}, true);
  EXPECT_EQ(r["reasoning_effort"], "none");  // docs/server.md: none is no reasoning channel
  EXPECT_EQ(r["max_completion_tokens"], 300);
  EXPECT_EQ(r["stop"], nlohmann::json::array({"\n\n"}));
  EXPECT_EQ(r["ignore_eos"], true);
}

TEST(Connect, CompletionRequestTextOrIds) {
  ipc::compute::Sampling s;
  nlohmann::json r = CompletionRequest("m", "Once upon", {}, s, 32, {}, false);
  EXPECT_EQ(r["prompt"], "Once upon");
  EXPECT_EQ(r["max_tokens"], 32);
  EXPECT_EQ(r["temperature"], 0.0);
  r = CompletionRequest("m", "", {5, 6, 7}, s, 0, {}, false);
  EXPECT_EQ(r["prompt"], nlohmann::json::array({5, 6, 7}));
  EXPECT_FALSE(r.contains("max_tokens"));
}

TEST(Connect, EventStreamAcrossAnyCut) {
  const std::string stream =
      ": waiting\n\ndata: {\"a\":1}\n\ndata: {\"b\":\r\ndata: 2}\r\n\r\nevent: x\ndata: [DONE]\n\n";
  for (size_t cut = 0; cut <= stream.size(); ++cut) {
    SseSplitter sse;
    std::vector<std::string> got = sse.Push(stream.substr(0, cut));
    for (std::string& d : sse.Push(stream.substr(cut))) got.push_back(std::move(d));
    EXPECT_EQ(got, (std::vector<std::string>{"{\"a\":1}", "{\"b\":\n2}", "[DONE]"})) << "cut at " << cut;
  }
}

TEST(Connect, StreamChunks) {
  StreamPiece p = ParseStreamData(
      R"({"object":"chat.completion.chunk","choices":[{"index":0,"delta":{"reasoning_content":"hm"},"finish_reason":null}]})");
  EXPECT_EQ(p.reasoning, "hm");
  EXPECT_EQ(p.content, "");
  EXPECT_EQ(p.finish_reason, "");
  p = ParseStreamData(R"({"choices":[{"delta":{"content":"Hi"},"finish_reason":"stop","token_ids":[4,5]}]})");
  EXPECT_EQ(p.content, "Hi");
  EXPECT_EQ(p.finish_reason, "stop");
  EXPECT_EQ(p.token_ids, (std::vector<int32_t>{4, 5}));
  p = ParseStreamData(R"({"object":"text_completion","choices":[{"text":" there","finish_reason":null}]})");
  EXPECT_EQ(p.content, " there");
  p = ParseStreamData(
      R"({"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":3,"prompt_tokens_details":{"cached_tokens":8}}})");
  EXPECT_EQ(p.prompt_tokens, 12);
  EXPECT_EQ(p.completion_tokens, 3);
  EXPECT_EQ(p.cached_tokens, 8);
  EXPECT_TRUE(ParseStreamData("[DONE]").done);
  EXPECT_THROW(ParseStreamData("not json"), Error);
  EXPECT_THROW(ParseStreamData(R"({"error":{"message":"boom"}})"), Error);
  EXPECT_THROW(ParseStreamData(R"({"id":"x"})"), Error);
}

TEST(Connect, HttpFailuresAreOneLineAndAnExitCode) {
  const std::string body = R"({"error":{"message":"Incorrect API key","type":"invalid_request_error"}})";
  Error e = HttpFailure("http://h:1", 401, body);
  EXPECT_EQ(e.code(), kExitUsage);
  EXPECT_EQ(std::string(e.what()).rfind("http://h:1 answered 401: Incorrect API key (the API key:", 0), 0u) << e.what();
  EXPECT_EQ(HttpFailure("u", 403, "").code(), kExitUsage);
  EXPECT_EQ(HttpFailure("u", 400, "{}").code(), kExitUsage);
  EXPECT_EQ(HttpFailure("u", 404, "<html>").code(), kExitUsage);
  EXPECT_EQ(HttpFailure("u", 429, "").code(), kExitRuntime);
  EXPECT_EQ(HttpFailure("u", 503, "").code(), kExitRuntime);
  EXPECT_EQ(std::string(HttpFailure("u", 500, "").what()), "u answered 500");
  EXPECT_EQ(ServedModel(R"({"object":"list","data":[{"id":"k3-demo-tiny","object":"model"}]})"), "k3-demo-tiny");
  EXPECT_THROW(ServedModel("{}"), Error);
}

}  // namespace
}  // namespace k3::launch
