// services/server/openai_request: the body of /v1/completions and /v1/chat/completions ->
// RequestSpec, or a 400 invalid_request_error naming the field. Expected values are docs/server.md
// ("Endpoints", "Errors") and the OpenAI API reference, with the ranges of docs/sampling.md.
#include "services/server/openai_request.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <string>
#include <variant>

namespace k3::server {
namespace {

RequestDefaults Defaults() {
  RequestDefaults d;
  d.sampling.temperature = 0.7f;
  d.sampling.top_p = 0.9f;
  d.sampling.top_k = 40;
  d.sampling.min_p = 0.05f;
  d.sampling.repeat_penalty = 1.1f;
  d.sampling.presence_penalty = 0.25f;
  d.sampling.frequency_penalty = 0.5f;
  d.thinking = true;
  d.effort = "max";
  return d;
}

RequestSpec Ok(const std::string& body, Endpoint e) {
  auto r = ParseRequest(body, e, Defaults());
  if (auto* err = std::get_if<HttpError>(&r)) ADD_FAILURE() << body << " -> " << err->status << " " << err->message;
  return std::holds_alternative<RequestSpec>(r) ? std::get<RequestSpec>(r) : RequestSpec{};
}
RequestSpec Completion(const std::string& fields) { return Ok(R"({"model": "m", )" + fields + "}", Endpoint::kCompletions); }
RequestSpec Chat(const std::string& fields) {
  return Ok(R"({"model": "m", "messages": [{"role": "user", "content": "hi"}], )" + fields + "}", Endpoint::kChat);
}

// The error of a body that must be refused: 400 invalid_request_error, its message containing `says`.
void Refused(const std::string& body, Endpoint e, const std::string& says) {
  auto r = ParseRequest(body, e, Defaults());
  ASSERT_TRUE(std::holds_alternative<HttpError>(r)) << body << " was accepted";
  const HttpError& err = std::get<HttpError>(r);
  EXPECT_EQ(err.status, 400) << body;
  EXPECT_EQ(err.type, "invalid_request_error") << body;
  EXPECT_NE(err.message.find(says), std::string::npos) << body << " -> " << err.message << " (wanted " << says << ")";
}
void CompletionRefused(const std::string& fields, const std::string& says) {
  Refused(R"({"model": "m", "prompt": "x", )" + fields + "}", Endpoint::kCompletions, says);
}
void ChatRefused(const std::string& fields, const std::string& says) {
  Refused(R"({"model": "m", "messages": [{"role": "user", "content": "hi"}], )" + fields + "}", Endpoint::kChat, says);
}

TEST(OpenaiRequest, BodyMustBeAJsonObject) {
  Refused("{\"model\": ", Endpoint::kCompletions, "invalid JSON");
  Refused("", Endpoint::kChat, "invalid JSON");
  Refused("[1, 2]", Endpoint::kCompletions, "JSON object");
  Refused("\"text\"", Endpoint::kChat, "JSON object");
}

TEST(OpenaiRequest, ModelIsARequiredString) {
  Refused(R"({"prompt": "x"})", Endpoint::kCompletions, "'model' is required");
  Refused(R"({"model": null, "prompt": "x"})", Endpoint::kCompletions, "'model' is required");
  Refused(R"({"model": 3, "prompt": "x"})", Endpoint::kCompletions, "'model'");
  EXPECT_EQ(Completion(R"("prompt": "x")").model, "m");
  EXPECT_EQ(Completion(R"("prompt": "x")").endpoint, Endpoint::kCompletions);
  EXPECT_EQ(Chat(R"("stream": false)").endpoint, Endpoint::kChat);
}

TEST(OpenaiRequest, CompletionPromptForms) {
  EXPECT_EQ(Completion(R"("prompt": "Once upon")").prompt_text, "Once upon");
  EXPECT_FALSE(Completion(R"("prompt": "Once upon")").prompt_ids.has_value());
  EXPECT_EQ(Completion(R"("prompt": ["Once upon"])").prompt_text, "Once upon");  // a one-string array
  const RequestSpec ids = Completion(R"("prompt": [1, 5, 9, 200])");
  ASSERT_TRUE(ids.prompt_ids.has_value());
  EXPECT_EQ(*ids.prompt_ids, (std::vector<int32_t>{1, 5, 9, 200}));
  EXPECT_TRUE(ids.prompt_text.empty());
}

TEST(OpenaiRequest, CompletionPromptRefusals) {
  Refused(R"({"model": "m"})", Endpoint::kCompletions, "'prompt' is required");
  Refused(R"({"model": "m", "prompt": ""})", Endpoint::kCompletions, "'prompt'");
  Refused(R"({"model": "m", "prompt": ["a", "b"]})", Endpoint::kCompletions, "'prompt'");  // one prompt per request
  Refused(R"({"model": "m", "prompt": 7})", Endpoint::kCompletions, "'prompt'");
  Refused(R"({"model": "m", "prompt": [1, -2]})", Endpoint::kCompletions, "'prompt'");
  Refused(R"({"model": "m", "prompt": [1, 2.5]})", Endpoint::kCompletions, "'prompt'");
  Refused(R"({"model": "m", "prompt": [1, 4294967296]})", Endpoint::kCompletions, "'prompt'");
}

TEST(OpenaiRequest, ChatMessages) {
  const RequestSpec r = Ok(R"({"model": "m", "messages": [
      {"role": "developer", "content": "be brief"},
      {"role": "user", "content": [{"type": "text", "text": "Hello, "}, {"type": "text", "text": "there"}]},
      {"role": "assistant", "content": "Hi.", "reasoning_content": "greet back"},
      {"role": "user", "content": "Again"}]})",
                           Endpoint::kChat);
  ASSERT_EQ(r.messages.size(), 4u);
  EXPECT_EQ(r.messages[0].role, "system");  // developer is OpenAI's newer name for system
  EXPECT_EQ(r.messages[0].content, "be brief");
  EXPECT_EQ(r.messages[1].role, "user");
  EXPECT_EQ(r.messages[1].content, "Hello, there");  // text parts joined
  EXPECT_EQ(r.messages[2].role, "assistant");
  EXPECT_EQ(r.messages[2].content, "Hi.");
  ASSERT_TRUE(r.messages[2].reasoning.has_value());
  EXPECT_EQ(*r.messages[2].reasoning, "greet back");
  EXPECT_FALSE(r.messages[3].reasoning.has_value());
}

TEST(OpenaiRequest, ChatMessageRefusals) {
  Refused(R"({"model": "m"})", Endpoint::kChat, "'messages' is required");
  Refused(R"({"model": "m", "messages": []})", Endpoint::kChat, "'messages'");
  Refused(R"({"model": "m", "messages": {"role": "user"}})", Endpoint::kChat, "'messages'");
  Refused(R"({"model": "m", "messages": ["hi"]})", Endpoint::kChat, "messages[0]");
  Refused(R"({"model": "m", "messages": [{"content": "hi"}]})", Endpoint::kChat, "messages[0].role");
  Refused(R"({"model": "m", "messages": [{"role": "user", "content": "a"}, {"role": "function", "content": "b"}]})",
          Endpoint::kChat, "messages[1].role");
  Refused(R"({"model": "m", "messages": [{"role": "user", "content": 5}]})", Endpoint::kChat, "messages[0].content");
  Refused(R"({"model": "m", "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]})",
          Endpoint::kChat, "messages[0].content");
  Refused(R"({"model": "m", "messages": [{"role": "assistant", "content": "a", "reasoning_content": 1}]})",
          Endpoint::kChat, "reasoning_content");
}

TEST(OpenaiRequest, ReasoningEffortAndThinking) {
  const RequestSpec d = Chat(R"("stream": false)");
  EXPECT_TRUE(d.thinking);  // the server's defaults
  EXPECT_EQ(d.effort, "max");
  EXPECT_FALSE(Chat(R"("reasoning_effort": "none")").thinking);  // none: no reasoning channel
  EXPECT_EQ(Chat(R"("reasoning_effort": "minimal")").effort, "low");
  EXPECT_EQ(Chat(R"("reasoning_effort": "low")").effort, "low");
  EXPECT_EQ(Chat(R"("reasoning_effort": "medium")").effort, "high");
  EXPECT_EQ(Chat(R"("reasoning_effort": "high")").effort, "high");
  EXPECT_EQ(Chat(R"("reasoning_effort": "max")").effort, "max");
  EXPECT_TRUE(Chat(R"("reasoning_effort": "high")").thinking);
  ChatRefused(R"("reasoning_effort": "extreme")", "'reasoning_effort'");
  ChatRefused(R"("reasoning_effort": 2)", "'reasoning_effort'");
  EXPECT_FALSE(Chat(R"("chat_template_kwargs": {"thinking": false})").thinking);
  EXPECT_TRUE(Chat(R"("chat_template_kwargs": {"thinking": true})").thinking);
  ChatRefused(R"("chat_template_kwargs": {"thinking": "no"})", "thinking");
  ChatRefused(R"("chat_template_kwargs": [1])", "'chat_template_kwargs'");
}

TEST(OpenaiRequest, MaxTokens) {
  EXPECT_FALSE(Completion(R"("prompt": "x")").max_tokens.has_value());  // absent: up to the context
  EXPECT_EQ(Completion(R"("prompt": "x", "max_tokens": 16)").max_tokens, 16);
  EXPECT_EQ(Chat(R"("max_completion_tokens": 9)").max_tokens, 9);
  EXPECT_EQ(Chat(R"("max_tokens": 7)").max_tokens, 7);  // the deprecated chat name still works
  EXPECT_EQ(Chat(R"("max_tokens": 7, "max_completion_tokens": 9)").max_tokens, 9);
  CompletionRefused(R"("max_tokens": 0)", "'max_tokens'");
  CompletionRefused(R"("max_tokens": -3)", "'max_tokens'");
  CompletionRefused(R"("max_tokens": 1.5)", "'max_tokens'");
  CompletionRefused(R"("max_tokens": "16")", "'max_tokens'");
  ChatRefused(R"("max_completion_tokens": 0)", "'max_completion_tokens'");
}

TEST(OpenaiRequest, SamplingDefaultsKeptWhenAbsentOrNull) {
  const RequestSpec r = Completion(R"("prompt": "x", "temperature": null, "top_p": null)");
  const RequestDefaults d = Defaults();
  EXPECT_FLOAT_EQ(r.sampling.temperature, d.sampling.temperature);
  EXPECT_FLOAT_EQ(r.sampling.top_p, d.sampling.top_p);
  EXPECT_EQ(r.sampling.top_k, d.sampling.top_k);
  EXPECT_FLOAT_EQ(r.sampling.min_p, d.sampling.min_p);
  EXPECT_FLOAT_EQ(r.sampling.repeat_penalty, d.sampling.repeat_penalty);
  EXPECT_FLOAT_EQ(r.sampling.presence_penalty, d.sampling.presence_penalty);
  EXPECT_FLOAT_EQ(r.sampling.frequency_penalty, d.sampling.frequency_penalty);
  EXPECT_EQ(r.sampling.repeat_last_n, d.sampling.repeat_last_n);
}

TEST(OpenaiRequest, SamplingFieldsSet) {
  const RequestSpec r = Completion(R"("prompt": "x", "temperature": 1.5, "top_p": 0.5, "top_k": 8, "min_p": 0.1,
      "presence_penalty": -1.5, "frequency_penalty": 2, "repetition_penalty": 1.3, "seed": 12345)");
  EXPECT_FLOAT_EQ(r.sampling.temperature, 1.5f);
  EXPECT_FLOAT_EQ(r.sampling.top_p, 0.5f);
  EXPECT_EQ(r.sampling.top_k, 8);
  EXPECT_FLOAT_EQ(r.sampling.min_p, 0.1f);
  EXPECT_FLOAT_EQ(r.sampling.presence_penalty, -1.5f);
  EXPECT_FLOAT_EQ(r.sampling.frequency_penalty, 2.0f);
  EXPECT_FLOAT_EQ(r.sampling.repeat_penalty, 1.3f);
  EXPECT_EQ(r.sampling.seed, 12345u);
  EXPECT_FLOAT_EQ(Chat(R"("temperature": 0)").sampling.temperature, 0.0f);
  // top_k: -1 or 0 is off.
  EXPECT_EQ(Completion(R"("prompt": "x", "top_k": -1)").sampling.top_k, 0);
  EXPECT_EQ(Completion(R"("prompt": "x", "top_k": 0)").sampling.top_k, 0);
  // The range bounds themselves are in range (docs/sampling.md).
  EXPECT_FLOAT_EQ(Completion(R"("prompt": "x", "top_p": 1, "min_p": 1, "presence_penalty": 2)").sampling.top_p, 1.0f);
  EXPECT_FLOAT_EQ(Completion(R"("prompt": "x", "min_p": 0, "frequency_penalty": -2)").sampling.frequency_penalty, -2.0f);
}

TEST(OpenaiRequest, SeedIsRandomWhenAbsent) {
  // docs/server.md: the TOML's seed is not used; a request without `seed` gets a random one.
  RequestDefaults d = Defaults();
  d.sampling.seed = 77;
  bool differs = false;
  uint64_t first = 0;
  for (int i = 0; i < 4 && !differs; ++i) {
    auto r = ParseRequest(R"({"model": "m", "prompt": "x"})", Endpoint::kCompletions, d);
    ASSERT_TRUE(std::holds_alternative<RequestSpec>(r));
    const uint64_t s = std::get<RequestSpec>(r).sampling.seed;
    if (i == 0) first = s;
    differs = s != first;
    EXPECT_NE(s, 77u);
  }
  EXPECT_TRUE(differs) << "four requests without a seed all got " << first;
  CompletionRefused(R"("seed": -1)", "'seed'");
  CompletionRefused(R"("seed": 1.5)", "'seed'");
  CompletionRefused(R"("seed": "1")", "'seed'");
}

TEST(OpenaiRequest, SamplingRangesNamedByTheRequestField) {
  // docs/sampling.md's ranges; docs/server.md: "named by the request's field".
  CompletionRefused(R"("temperature": -0.5)", "'temperature'");
  CompletionRefused(R"("top_p": 0)", "'top_p'");
  CompletionRefused(R"("top_p": 1.5)", "'top_p'");
  CompletionRefused(R"("min_p": 1.5)", "'min_p'");
  CompletionRefused(R"("min_p": -0.1)", "'min_p'");
  CompletionRefused(R"("top_k": -2)", "'top_k'");
  CompletionRefused(R"("presence_penalty": 2.5)", "'presence_penalty'");
  CompletionRefused(R"("frequency_penalty": -3)", "'frequency_penalty'");
  CompletionRefused(R"("repetition_penalty": 0)", "'repetition_penalty'");
  CompletionRefused(R"("repetition_penalty": -1)", "'repetition_penalty'");
  // Wrong types name the field too.
  CompletionRefused(R"("temperature": "hot")", "'temperature'");
  CompletionRefused(R"("top_p": true)", "'top_p'");
  CompletionRefused(R"("top_k": 2.5)", "'top_k'");
}

TEST(OpenaiRequest, CompletionLogprobs) {
  EXPECT_EQ(Completion(R"("prompt": "x")").logprobs, -1);  // off
  EXPECT_EQ(Completion(R"("prompt": "x", "logprobs": 0)").logprobs, 0);
  EXPECT_EQ(Completion(R"("prompt": "x", "logprobs": 5)").logprobs, 5);
  EXPECT_EQ(Completion(R"("prompt": "x", "logprobs": 20)").logprobs, 20);
  CompletionRefused(R"("logprobs": 21)", "'logprobs'");
  CompletionRefused(R"("logprobs": -2)", "'logprobs'");
  CompletionRefused(R"("logprobs": 2.5)", "'logprobs'");
}

TEST(OpenaiRequest, ChatLogprobs) {
  EXPECT_EQ(Chat(R"("logprobs": false)").logprobs, -1);
  EXPECT_EQ(Chat(R"("logprobs": true)").logprobs, 0);
  EXPECT_EQ(Chat(R"("logprobs": true, "top_logprobs": 3)").logprobs, 3);
  EXPECT_EQ(Chat(R"("logprobs": true, "top_logprobs": 20)").logprobs, 20);
  ChatRefused(R"("logprobs": true, "top_logprobs": 21)", "'top_logprobs'");
  ChatRefused(R"("logprobs": true, "top_logprobs": -1)", "'top_logprobs'");
  ChatRefused(R"("top_logprobs": 2)", "'top_logprobs'");  // OpenAI: needs logprobs true
  ChatRefused(R"("logprobs": 1)", "'logprobs'");          // chat's logprobs is a boolean
}

TEST(OpenaiRequest, Stop) {
  EXPECT_TRUE(Completion(R"("prompt": "x")").stop.empty());
  EXPECT_EQ(Completion(R"("prompt": "x", "stop": "\n")").stop, (std::vector<std::string>{"\n"}));
  EXPECT_EQ(Chat(R"("stop": ["a", "bc", "d", "e"])").stop, (std::vector<std::string>{"a", "bc", "d", "e"}));
  CompletionRefused(R"("stop": ["a", "b", "c", "d", "e"])", "'stop'");  // up to 4
  CompletionRefused(R"("stop": 3)", "'stop'");
  CompletionRefused(R"("stop": ["a", 3])", "'stop'");
  CompletionRefused(R"("stop": "")", "'stop'");
}

TEST(OpenaiRequest, StreamAndExtensions) {
  const RequestSpec off = Completion(R"("prompt": "x")");
  EXPECT_FALSE(off.stream);
  EXPECT_FALSE(off.include_usage);
  EXPECT_FALSE(off.return_token_ids);
  EXPECT_FALSE(off.ignore_eos);
  const RequestSpec on = Chat(R"("stream": true, "stream_options": {"include_usage": true}, "return_token_ids": true,
      "ignore_eos": true)");
  EXPECT_TRUE(on.stream);
  EXPECT_TRUE(on.include_usage);
  EXPECT_TRUE(on.return_token_ids);
  EXPECT_TRUE(on.ignore_eos);
  CompletionRefused(R"("stream": "yes")", "'stream'");
  CompletionRefused(R"("stream": true, "stream_options": 1)", "'stream_options'");
  CompletionRefused(R"("stream": true, "stream_options": {"include_usage": 1})", "include_usage");
  CompletionRefused(R"("ignore_eos": 1)", "'ignore_eos'");
  CompletionRefused(R"("return_token_ids": "true")", "'return_token_ids'");
}

TEST(OpenaiRequest, UnsupportedFieldsAre400) {
  // docs/server.md: n other than 1, echo, suffix, best_of > 1, logit_bias, tools on
  // /v1/completions, a response_format type other than text, json_object and json_schema, and
  // response_format with tools are 400.
  EXPECT_EQ(Completion(R"("prompt": "x", "n": 1, "best_of": 1, "echo": false, "suffix": "", "logit_bias": {},
      "response_format": {"type": "text"}, "tools": [])").prompt_text, "x");
  CompletionRefused(R"("n": 2)", "'n'");
  ChatRefused(R"("n": 3)", "'n'");
  CompletionRefused(R"("echo": true)", "'echo'");
  CompletionRefused(R"("suffix": "end")", "'suffix'");
  CompletionRefused(R"("best_of": 2)", "'best_of'");
  CompletionRefused(R"("logit_bias": {"50256": -100})", "'logit_bias'");
  ChatRefused(R"("logit_bias": {"1": 5})", "'logit_bias'");
  ChatRefused(R"("response_format": {"type": "xml"})", "'response_format.type' must be text, json_object or json_schema");
  CompletionRefused(R"("tools": [{"type": "function", "function": {"name": "f"}}])", "'tools'");
  ChatRefused(R"("response_format": {"type": "json_object"}, "tools": [{"type": "function", "function": {"name": "f"}}])",
              "'response_format' with 'tools'");
}

TEST(OpenaiRequest, UnknownFieldsAreIgnored) {
  EXPECT_EQ(Completion(R"("prompt": "x", "user": "u-1", "metadata": {"a": "b"}, "k3_unheard_of": [1, 2])").prompt_text,
            "x");
  EXPECT_EQ(Chat(R"("user": "u-1", "store": false, "parallel_tool_calls": true)").messages.size(), 1u);
}

}  // namespace
}  // namespace k3::server

// Tool calling (docs/server.md "Tool calls"; OpenAI's chat completions reference for the shapes).
namespace k3::server {
namespace {
const char* kTool = R"({"type": "function", "function": {"name": "get_weather", "description": "d",
                        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}, "strict": false}})";

TEST(OpenaiRequestTools, ToolsChoiceAndParallel) {
  RequestSpec r = Chat(std::string(R"("tools": [)") + kTool + R"(], "tool_choice": "required", "parallel_tool_calls": false)");
  EXPECT_EQ(r.tools.declared, std::vector<std::string>{"get_weather"});
  EXPECT_EQ(r.tools.choice, ipc::tokenizer::ToolChoice::kRequired);
  EXPECT_FALSE(r.tools.parallel);
  EXPECT_EQ(nlohmann::json::parse(r.tools_json), nlohmann::json::parse(std::string("[") + kTool + "]"));
  r = Chat(std::string(R"("tools": [)") + kTool + R"(], "tool_choice": {"type": "function", "function": {"name": "get_weather"}})");
  EXPECT_EQ(r.tools.choice, ipc::tokenizer::ToolChoice::kNamed);
  EXPECT_EQ(r.tools.named, "get_weather");
  EXPECT_TRUE(r.tools.parallel);
  EXPECT_EQ(Chat(std::string(R"("tools": [)") + kTool + R"(], "tool_choice": "none")").tools.choice, ipc::tokenizer::ToolChoice::kNone);
  r = Chat(R"("tools": [], "tool_choice": "auto")");
  EXPECT_TRUE(r.tools_json.empty());
  EXPECT_TRUE(r.tools.declared.empty());
}

TEST(OpenaiRequestTools, BadToolFieldsAre400NamingTheField) {
  const std::string t = std::string(R"("tools": [)") + kTool + "]";
  ChatRefused(R"("tools": {})", "'tools' must be an array");
  ChatRefused(R"("tools": [{"type": "code", "function": {"name": "f"}}])", "tools[0].type");
  ChatRefused(R"("tools": [{"type": "function", "function": {"name": "has space"}}])", "tools[0].function.name");
  ChatRefused(R"("tools": [{"type": "function", "function": {"name": "f", "parameters": 3}}])", "parameters");
  ChatRefused(R"("tools": [{"type": "function", "function": {"name": "f", "strict": true}}])", "strict");
  ChatRefused(R"("tools": [{"type": "function", "function": {"name": "f", "examples": []}}])", "unknown field 'examples'");
  ChatRefused(R"("tools": [{"type": "function", "function": {"name": "f"}}, {"type": "function", "function": {"name": "f"}}])",
              "twice");
  ChatRefused(t + R"(, "tool_choice": "any")", "'tool_choice' must be");
  ChatRefused(t + R"(, "tool_choice": {"type": "function", "function": {"name": "other"}})", "does not declare");
  ChatRefused(R"("tool_choice": "required")", "declares none");
  ChatRefused(t + R"(, "parallel_tool_calls": "yes")", "parallel_tool_calls");
  CompletionRefused(t, "'tools' is not supported");
}

RequestSpec Conversation(const std::string& messages) {
  return Ok(R"({"model": "m", "messages": )" + messages + "}", Endpoint::kChat);
}

TEST(OpenaiRequestTools, AssistantCallsAndToolResults) {
  const RequestSpec r = Conversation(R"([{"role": "user", "content": "w?"},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
        "function": {"name": "get_weather", "arguments": "{\"city\": \"Rome\"}"}}]},
      {"role": "tool", "tool_call_id": "c1", "name": "get_weather", "content": [{"type": "text", "text": "sunny"}]}])");
  ASSERT_EQ(r.messages.size(), 3u);
  EXPECT_EQ(r.messages[1].content, "");
  ASSERT_EQ(r.messages[1].tool_calls.size(), 1u);
  EXPECT_EQ(r.messages[1].tool_calls[0].id, "c1");
  EXPECT_EQ(r.messages[1].tool_calls[0].name, "get_weather");
  EXPECT_EQ(r.messages[1].tool_calls[0].arguments, "{\"city\": \"Rome\"}");
  EXPECT_EQ(r.messages[2].role, "tool");
  EXPECT_EQ(r.messages[2].tool_call_id, std::optional<std::string>("c1"));
  EXPECT_EQ(r.messages[2].content, "sunny");
  // The history line the tokenizer renders from.
  EXPECT_EQ(nlohmann::json::parse(HistoryJsonl({r.messages[1]})),
            nlohmann::json::parse(R"({"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function",
                                     "function": {"name": "get_weather", "arguments": "{\"city\": \"Rome\"}"}}]})"));
}

TEST(OpenaiRequestTools, BadMessageToolFields) {
  auto refused = [](const std::string& msgs, const std::string& says) {
    Refused(R"({"model": "m", "messages": )" + msgs + "}", Endpoint::kChat, says);
  };
  const std::string u = R"({"role": "user", "content": "q"})";
  const std::string a = R"({"role": "assistant", "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]})";
  refused("[" + u + R"(, {"role": "tool", "content": "r"}])", "tool_call_id is required");
  refused(R"([{"role": "user", "content": "q", "tool_calls": []}])", "only assistant messages");
  refused(R"([{"role": "user", "content": "q", "tool_call_id": "x"}])", "only tool messages");
  refused("[" + u + R"(, {"role": "assistant", "tool_calls": [{"type": "function", "function": {"name": "f"}}]}])", ".id");
  refused("[" + u + R"(, {"role": "assistant", "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": {}}}]}])",
          "arguments must be a string");
  refused("[" + u + "," + a + R"(, {"role": "tool", "tool_call_id": "c1", "name": "g", "content": "r"}])", "'g' but the call 'c1'");
  refused(R"([{"role": "function", "content": "x"}])", "not supported");
}
}  // namespace
}  // namespace k3::server
