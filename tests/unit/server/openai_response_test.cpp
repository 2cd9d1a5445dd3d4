// services/server/openai_response: OpenAI's response shapes (docs/server.md "Endpoints", the
// OpenAI API reference's completion, chat completion and chunk objects): fields, usage,
// finish_reason, logprobs, streamed chunks and error objects.
#include "services/server/openai_response.h"

#include <gtest/gtest.h>

#include <memory>

namespace k3::server {
namespace {
using nlohmann::json;

ResponseIds Ids(const char* id) { return {id, 1700000000, "k3-demo-tiny"}; }

std::unique_ptr<Job> MakeJob(Endpoint e, bool thinking = true, int32_t logprobs = -1) {
  RequestSpec s;
  s.endpoint = e;
  s.model = "k3-demo-tiny";
  s.thinking = thinking;
  s.logprobs = logprobs;
  auto j = std::make_unique<Job>(7, s);
  j->phase = Job::Phase::kFinished;
  j->finish_reason = "stop";
  j->prompt_tokens = 12;
  j->completion_tokens = 5;
  j->cached_tokens = 4;
  j->reasoning_tokens = 2;
  j->prompt_ids = {1, 2, 3};
  j->token_ids = {40, 41, 42, 43, 44};
  return j;
}

std::unique_ptr<Job> WithSpec(RequestSpec s) {
  auto j = std::make_unique<Job>(8, std::move(s));
  j->finish_reason = "length";
  j->prompt_tokens = 3;
  j->completion_tokens = 2;
  j->prompt_ids = {9, 8, 7};
  j->token_ids = {5, 6};
  return j;
}

TEST(OpenaiResponse, ErrorObject) {
  HttpError e;
  e.status = 400;
  e.message = "'top_p' 1.5: must be in (0, 1]";
  e.code = "invalid_value";
  const json j = ErrorJson(e);
  ASSERT_TRUE(j.contains("error"));
  EXPECT_EQ(j["error"]["message"], e.message);
  EXPECT_EQ(j["error"]["type"], "invalid_request_error");
  EXPECT_TRUE(j["error"].contains("param"));
  EXPECT_EQ(j["error"]["code"], "invalid_value");
  e.code.clear();
  e.type = "rate_limit_error";
  const json k = ErrorJson(e);
  EXPECT_TRUE(k["error"]["code"].is_null());
  EXPECT_EQ(k["error"]["type"], "rate_limit_error");
}

TEST(OpenaiResponse, DumpReplacesInvalidUtf8) {
  const json j = {{"text", std::string("a\xe2\x82")}};  // the first two bytes of a three-byte character
  std::string out;
  EXPECT_NO_THROW(out = Dump(j));
  EXPECT_EQ(json::parse(out)["text"], "a\xef\xbf\xbd") << out;  // one U+FFFD for the cut character
  EXPECT_EQ(Dump(json{{"k", "v"}}), R"({"k":"v"})");
}

TEST(OpenaiResponse, UsageCompletion) {
  auto j = MakeJob(Endpoint::kCompletions);
  const json u = UsageJson(*j);
  EXPECT_EQ(u["prompt_tokens"], 12);
  EXPECT_EQ(u["completion_tokens"], 5);
  EXPECT_EQ(u["total_tokens"], 17);
  EXPECT_EQ(u["prompt_tokens_details"]["cached_tokens"], 4);
  EXPECT_FALSE(u.contains("completion_tokens_details"));  // reasoning tokens are chat's
}

TEST(OpenaiResponse, UsageChat) {
  auto j = MakeJob(Endpoint::kChat);
  const json u = UsageJson(*j);
  EXPECT_EQ(u["total_tokens"], 17);
  EXPECT_EQ(u["prompt_tokens_details"]["cached_tokens"], 4);
  EXPECT_EQ(u["completion_tokens_details"]["reasoning_tokens"], 2);
}

TEST(OpenaiResponse, FullCompletion) {
  auto j = MakeJob(Endpoint::kCompletions);
  const json r = FullResponse(Ids("cmpl-1"), *j, {{"", "Once", {}}, {"", " upon", {}}});
  EXPECT_EQ(r["id"], "cmpl-1");
  EXPECT_EQ(r["object"], "text_completion");
  EXPECT_EQ(r["created"], 1700000000);
  EXPECT_EQ(r["model"], "k3-demo-tiny");
  ASSERT_EQ(r["choices"].size(), 1u);
  const json& c = r["choices"][0];
  EXPECT_EQ(c["index"], 0);
  EXPECT_EQ(c["text"], "Once upon");
  EXPECT_TRUE(c["logprobs"].is_null());  // not asked for
  EXPECT_EQ(c["finish_reason"], "stop");
  EXPECT_FALSE(c.contains("token_ids"));
  EXPECT_FALSE(r.contains("prompt_token_ids"));
  EXPECT_EQ(r["usage"]["total_tokens"], 17);
}

TEST(OpenaiResponse, FullChat) {
  auto j = MakeJob(Endpoint::kChat);
  j->finish_reason = "length";
  const json r = FullResponse(Ids("chatcmpl-2"), *j, {{"let me ", "", {}}, {"think", "Hel", {}}, {"", "lo", {}}});
  EXPECT_EQ(r["id"], "chatcmpl-2");
  EXPECT_EQ(r["object"], "chat.completion");
  EXPECT_EQ(r["model"], "k3-demo-tiny");
  ASSERT_EQ(r["choices"].size(), 1u);
  const json& c = r["choices"][0];
  EXPECT_EQ(c["index"], 0);
  EXPECT_EQ(c["message"]["role"], "assistant");
  EXPECT_EQ(c["message"]["content"], "Hello");
  EXPECT_EQ(c["message"]["reasoning_content"], "let me think");
  EXPECT_TRUE(c["logprobs"].is_null());
  EXPECT_EQ(c["finish_reason"], "length");
  EXPECT_EQ(r["usage"]["completion_tokens_details"]["reasoning_tokens"], 2);
}

TEST(OpenaiResponse, ChatWithoutThinkingHasNoReasoningChannel) {
  auto j = MakeJob(Endpoint::kChat, /*thinking=*/false);
  const json r = FullResponse(Ids("chatcmpl-3"), *j, {{"", "Hi", {}}});
  EXPECT_EQ(r["choices"][0]["message"]["content"], "Hi");
  EXPECT_FALSE(r["choices"][0]["message"].contains("reasoning_content"));
}

TEST(OpenaiResponse, ReturnTokenIds) {
  RequestSpec s;
  s.endpoint = Endpoint::kCompletions;
  s.return_token_ids = true;
  auto j = WithSpec(s);
  const json r = FullResponse(Ids("cmpl-4"), *j, {{"", "ab", {}}});
  EXPECT_EQ(r["choices"][0]["token_ids"], json({5, 6}));
  EXPECT_EQ(r["prompt_token_ids"], json({9, 8, 7}));
  EXPECT_EQ(r["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(r["usage"]["total_tokens"], 5);
}

TEST(OpenaiResponse, CompletionLogprobs) {
  const std::vector<TokenLogprob> toks = {{"He", -0.5f, {{"He", -0.5f}, {"Sh", -1.25f}}}, {"llo", -0.25f, {{"llo", -0.25f}}}};
  const json lp = LogprobsJson(Endpoint::kCompletions, toks, 3);
  EXPECT_EQ(lp["tokens"], json({"He", "llo"}));
  EXPECT_EQ(lp["token_logprobs"], json({-0.5, -0.25}));
  ASSERT_EQ(lp["top_logprobs"].size(), 2u);
  EXPECT_EQ(lp["top_logprobs"][0], json({{"He", -0.5}, {"Sh", -1.25}}));
  EXPECT_EQ(lp["top_logprobs"][1], json({{"llo", -0.25}}));
  EXPECT_EQ(lp["text_offset"], json({3, 5}));  // byte offsets: 3, then 3 + len("He")
}

TEST(OpenaiResponse, ChatLogprobs) {
  const std::vector<TokenLogprob> toks = {{"\xc3\xa9", -0.5f, {{"\xc3\xa9", -0.5f}, {"e", -2.0f}}}};
  const json lp = LogprobsJson(Endpoint::kChat, toks, 0);
  ASSERT_EQ(lp["content"].size(), 1u);
  const json& t = lp["content"][0];
  EXPECT_EQ(t["token"], "\xc3\xa9");
  EXPECT_EQ(t["logprob"], -0.5);
  EXPECT_EQ(t["bytes"], json({0xc3, 0xa9}));  // the token's UTF-8 bytes
  ASSERT_EQ(t["top_logprobs"].size(), 2u);
  EXPECT_EQ(t["top_logprobs"][1], json({{"token", "e"}, {"logprob", -2.0}, {"bytes", {101}}}));
  EXPECT_TRUE(lp["refusal"].is_null());
}

TEST(OpenaiResponse, FullResponseJoinsLogprobsOfEveryDelta) {
  auto j = MakeJob(Endpoint::kCompletions, true, 0);
  const json r = FullResponse(Ids("cmpl-5"), *j, {{"", "ab", {{"a", -1.0f, {}}, {"b", -2.0f, {}}}}, {"", "c", {{"c", -3.0f, {}}}}});
  const json& lp = r["choices"][0]["logprobs"];
  EXPECT_EQ(lp["tokens"], json({"a", "b", "c"}));
  EXPECT_EQ(lp["token_logprobs"], json({-1.0, -2.0, -3.0}));
  EXPECT_EQ(lp["text_offset"], json({0, 1, 2}));
}

TEST(OpenaiResponse, ChatChunks) {
  auto j = MakeJob(Endpoint::kChat);
  const Delta d1{"", "Hel", {}};
  const json first = Chunk(Ids("chatcmpl-6"), *j, &d1, /*first=*/true, "", 0);
  EXPECT_EQ(first["object"], "chat.completion.chunk");
  EXPECT_EQ(first["id"], "chatcmpl-6");
  EXPECT_EQ(first["created"], 1700000000);
  EXPECT_EQ(first["model"], "k3-demo-tiny");
  ASSERT_EQ(first["choices"].size(), 1u);
  EXPECT_EQ(first["choices"][0]["index"], 0);
  EXPECT_EQ(first["choices"][0]["delta"]["role"], "assistant");  // the first chat chunk carries role
  EXPECT_EQ(first["choices"][0]["delta"]["content"], "Hel");
  EXPECT_TRUE(first["choices"][0]["finish_reason"].is_null());
  EXPECT_FALSE(first.contains("usage"));  // only with include_usage

  const Delta d2{"hmm", "", {}};
  const json mid = Chunk(Ids("chatcmpl-6"), *j, &d2, false, "", 3);
  EXPECT_FALSE(mid["choices"][0]["delta"].contains("role"));
  EXPECT_EQ(mid["choices"][0]["delta"]["reasoning_content"], "hmm");
  EXPECT_TRUE(mid["choices"][0]["finish_reason"].is_null());

  const json last = Chunk(Ids("chatcmpl-6"), *j, nullptr, false, "stop", 3);
  EXPECT_EQ(last["choices"][0]["finish_reason"], "stop");
  EXPECT_FALSE(last["choices"][0]["delta"].contains("role"));
}

TEST(OpenaiResponse, CompletionChunks) {
  auto j = MakeJob(Endpoint::kCompletions);
  const Delta d{"", " upon", {}};
  const json c = Chunk(Ids("cmpl-7"), *j, &d, true, "", 4);
  EXPECT_EQ(c["object"], "text_completion");
  EXPECT_EQ(c["choices"][0]["text"], " upon");
  EXPECT_EQ(c["choices"][0]["index"], 0);
  EXPECT_TRUE(c["choices"][0]["finish_reason"].is_null());
  EXPECT_TRUE(c["choices"][0]["logprobs"].is_null());
  const json last = Chunk(Ids("cmpl-7"), *j, nullptr, false, "length", 9);
  EXPECT_EQ(last["choices"][0]["text"], "");
  EXPECT_EQ(last["choices"][0]["finish_reason"], "length");
}

TEST(OpenaiResponse, StreamedLogprobsContinueTheTextOffset) {
  auto j = MakeJob(Endpoint::kCompletions, true, 1);
  const Delta d{"", "xy", {{"x", -0.5f, {{"x", -0.5f}}}, {"y", -0.75f, {{"y", -0.75f}}}}};
  const json c = Chunk(Ids("cmpl-8"), *j, &d, false, "", 10);
  EXPECT_EQ(c["choices"][0]["logprobs"]["text_offset"], json({10, 11}));
  EXPECT_EQ(c["choices"][0]["logprobs"]["tokens"], json({"x", "y"}));
}

TEST(OpenaiResponse, IncludeUsage) {
  // OpenAI: with stream_options.include_usage every chunk has "usage": null, and one more chunk
  // with empty choices carries the usage.
  RequestSpec s;
  s.endpoint = Endpoint::kChat;
  s.stream = true;
  s.include_usage = true;
  s.return_token_ids = true;
  auto j = WithSpec(s);
  const Delta d{"", "a", {}};
  const json c = Chunk(Ids("chatcmpl-9"), *j, &d, true, "", 0);
  ASSERT_TRUE(c.contains("usage"));
  EXPECT_TRUE(c["usage"].is_null());
  EXPECT_FALSE(c["choices"][0].contains("token_ids"));  // only the last chunk has them
  const json last = Chunk(Ids("chatcmpl-9"), *j, nullptr, false, "length", 1);
  EXPECT_EQ(last["choices"][0]["token_ids"], json({5, 6}));
  const json u = UsageChunk(Ids("chatcmpl-9"), *j);
  EXPECT_EQ(u["object"], "chat.completion.chunk");
  EXPECT_EQ(u["id"], "chatcmpl-9");
  EXPECT_TRUE(u["choices"].is_array());
  EXPECT_TRUE(u["choices"].empty());
  EXPECT_EQ(u["usage"]["prompt_tokens"], 3);
  EXPECT_EQ(u["usage"]["completion_tokens"], 2);
  EXPECT_EQ(u["usage"]["total_tokens"], 5);
  RequestSpec cs;
  cs.endpoint = Endpoint::kCompletions;
  auto cj = WithSpec(cs);
  EXPECT_EQ(UsageChunk(Ids("cmpl-10"), *cj)["object"], "text_completion");
}

// Tool calls (docs/server.md "Tool calls"): the OpenAI shapes of message.tool_calls and of the
// streamed delta.tool_calls; what was not accepted in tool_call_errors.
TEST(OpenaiResponse, ToolCallsJoinIntoTheMessage) {
  auto j = MakeJob(Endpoint::kChat);
  j->finish_reason = "tool_calls";
  Delta reasoning{"why", "", {}, {}};
  Delta s0{"", "", {}, {{0, "call_x_0", "get_weather", ""}}};
  Delta f0{"", "", {}, {{0, "", "", "{\"city\":\"Rome\""}}};
  Delta f1{"", "", {}, {{0, "", "", "}"}}};
  Delta s1{"", "", {}, {{1, "call_x_1", "search", ""}}};
  Delta f2{"", "", {}, {{1, "", "", "{}"}}};
  const json r = FullResponse(Ids("chatcmpl-t"), *j, {reasoning, s0, f0, f1, s1, f2});
  const json& m = r["choices"][0]["message"];
  EXPECT_TRUE(m["content"].is_null());
  EXPECT_EQ(m["tool_calls"], json::parse(R"([
      {"id": "call_x_0", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Rome\"}"}},
      {"id": "call_x_1", "type": "function", "function": {"name": "search", "arguments": "{}"}}])"));
  EXPECT_EQ(r["choices"][0]["finish_reason"], "tool_calls");
  EXPECT_FALSE(m.contains("tool_call_errors"));
  // A refused call: its text is in the content, the reason in tool_call_errors.
  j->tool_call_errors = {{"the tool \"rm\" was not declared", "<|open|>call tool=\"rm\" index=\"1\"<|sep|><|close|>call<|sep|>"}};
  const json bad = FullResponse(Ids("chatcmpl-u"), *j, {{"", "<|open|>call ...", {}, {}}});
  EXPECT_EQ(bad["choices"][0]["message"]["content"], "<|open|>call ...");
  EXPECT_EQ(bad["choices"][0]["message"]["tool_call_errors"],
            json::parse(R"([{"error": "the tool \"rm\" was not declared",
                             "text": "<|open|>call tool=\"rm\" index=\"1\"<|sep|><|close|>call<|sep|>"}])"));
}

TEST(OpenaiResponse, StreamedToolCallDeltas) {
  auto j = MakeJob(Endpoint::kChat);
  Delta start{"", "", {}, {{0, "call_x_0", "get_weather", ""}}};
  Delta frag{"", "", {}, {{0, "", "", "{\"city\""}}};
  EXPECT_EQ(Chunk(Ids("c"), *j, &start, false, "", 0)["choices"][0]["delta"],
            json::parse(R"({"tool_calls": [{"index": 0, "id": "call_x_0", "type": "function",
                                            "function": {"name": "get_weather", "arguments": ""}}]})"));
  EXPECT_EQ(Chunk(Ids("c"), *j, &frag, false, "", 0)["choices"][0]["delta"],
            json::parse(R"({"tool_calls": [{"index": 0, "function": {"arguments": "{\"city\""}}]})"));
  j->tool_call_errors = {{"e", "t"}};
  const json last = Chunk(Ids("c"), *j, nullptr, false, "stop", 0);
  EXPECT_EQ(last["choices"][0]["tool_call_errors"], json::parse(R"([{"error": "e", "text": "t"}])"));
}

}  // namespace
}  // namespace k3::server
