// The tokenizer service: its pure core in-process (encode/decode/stream/chat replies, failures,
// rejects), and `k3-tokenizer serve` as a real process over real sockets (handshake, answers,
// malformed messages rejected and counted while it keeps answering, shutdown and signals).
#include "service_core.h"

#include <gtest/gtest.h>

#include "chat_template.h"
#include "common/error.h"
#include "services/tokenizer/service_process.h"
#include "test_vocab.h"
#include "tests/pipeline/services/service_harness.h"
#include "tests/unit/ipc/token_message.h"

namespace k3::tok {
namespace {

namespace tk = ipc::tokenizer;
namespace fs = std::filesystem;
using namespace std::chrono_literals;
using testing::TestTokenizer;

// By value: the reply is a temporary.
template <class T>
T As(const std::optional<tk::Message>& m) {
  if (!m.has_value()) {
    ADD_FAILURE() << "no reply";
    return T{};
  }
  if (!std::holds_alternative<T>(*m)) {
    ADD_FAILURE() << "reply holds alternative " << m->index();
    return T{};
  }
  return std::get<T>(*m);
}

std::vector<int32_t> Wire(const std::vector<uint32_t>& v) { return {v.begin(), v.end()}; }

TEST(TokenizerService, EncodeMatchesLibrary) {
  TokenizerService s(TestTokenizer());
  const std::string text = "hello world, <|open|> thinking\n\n";
  const auto& e = As<tk::EncodedIds>(s.Handle(tk::Encode{17, text, false}));
  EXPECT_EQ(e.request_id, 17u);
  EXPECT_EQ(e.ids, Wire(TestTokenizer().Encode(text, false)));
  const auto& sp = As<tk::EncodedIds>(s.Handle(tk::Encode{18, text, true}));
  EXPECT_EQ(sp.ids, Wire(TestTokenizer().Encode(text, true)));
  EXPECT_NE(sp.ids, e.ids);  // the special token is one id only with allow_special
  EXPECT_EQ(s.counters().requests, 2u);
  EXPECT_EQ(s.counters().encoded_bytes, 2 * text.size());
}

TEST(TokenizerService, OneShotDecodeIsConcatenatedBytes) {
  TokenizerService s(TestTokenizer());
  const auto& d = As<tk::Decoded>(s.Handle(tk::Decode{3, {'h', 'i', 0xe4, 0xbd, 0xa0}, false, false}));
  EXPECT_EQ(d.request_id, 3u);
  EXPECT_EQ(d.text, "hi\xe4\xbd\xa0");
  EXPECT_EQ(s.open_streams(), 0u);
}

TEST(TokenizerService, StreamNeverSplitsACharacter) {
  TokenizerService s(TestTokenizer());
  // "a" then the three bytes of U+4F60 one id at a time, then "b".
  EXPECT_EQ(As<tk::Decoded>(s.Handle(tk::Decode{9, {'a', 0xe4}, true, false})).text, "a");
  EXPECT_EQ(As<tk::Decoded>(s.Handle(tk::Decode{9, {0xbd}, true, false})).text, "");
  // Another stream in between keeps its own state.
  EXPECT_EQ(As<tk::Decoded>(s.Handle(tk::Decode{10, {'x'}, true, false})).text, "x");
  EXPECT_EQ(As<tk::Decoded>(s.Handle(tk::Decode{9, {0xa0, 'b'}, true, false})).text, "\xe4\xbd\xa0" "b");
  EXPECT_EQ(s.open_streams(), 2u);
  // final flushes what is held back (an incomplete character at the end) and forgets it.
  EXPECT_EQ(As<tk::Decoded>(s.Handle(tk::Decode{10, {0xe4}, true, false})).text, "");
  EXPECT_EQ(As<tk::Decoded>(s.Handle(tk::Decode{10, {}, true, true})).text, "\xe4");
  EXPECT_EQ(s.open_streams(), 1u);
}

TEST(TokenizerService, StreamCountIsBounded) {
  TokenizerService s(TestTokenizer());
  for (uint64_t id = 0; id < TokenizerService::kMaxStreams + 10; ++id)
    (void)As<tk::Decoded>(s.Handle(tk::Decode{id, {0xe4}, true, false}));
  EXPECT_EQ(s.open_streams(), TokenizerService::kMaxStreams);
  // The newest stream survived with its held-back byte.
  EXPECT_EQ(As<tk::Decoded>(s.Handle(tk::Decode{TokenizerService::kMaxStreams + 9, {0xbd, 0xa0}, true, true})).text,
            "\xe4\xbd\xa0");
}

TEST(TokenizerService, UnknownAndNegativeIdsFail) {
  TokenizerService s(TestTokenizer());
  const uint32_t gap = TestTokenizer().vocab().num_ranks() + 100;  // between added ids: unknown
  const auto& f = As<tk::Failed>(s.Handle(tk::Decode{4, {'a', static_cast<int32_t>(gap)}, false, false}));
  EXPECT_EQ(f.request_id, 4u);
  EXPECT_EQ(f.error, tk::Error::kUnknownId);
  EXPECT_NE(f.detail.find(std::to_string(gap)), std::string::npos) << f.detail;
  EXPECT_EQ(As<tk::Failed>(s.Handle(tk::Decode{5, {-3}, true, false})).error, tk::Error::kUnknownId);
  EXPECT_EQ(s.open_streams(), 0u);
  EXPECT_EQ(s.counters().failed, 2u);
}

TEST(TokenizerService, RenderChatMatchesTemplate) {
  TokenizerService s(TestTokenizer());
  const std::string hist = "{\"role\":\"system\",\"content\":\"be brief\"}\n{\"role\":\"user\",\"content\":\"hello\"}\n";
  const auto& e = As<tk::EncodedIds>(s.Handle(tk::RenderChat{6, hist, false, "", "", tk::ToolChoice::kAuto, false, ""}));
  ChatOptions opt;
  opt.thinking = false;
  const std::vector<ChatMessage> msgs = {{Role::kSystem, "be brief", std::nullopt}, {Role::kUser, "hello", std::nullopt}};
  EXPECT_EQ(e.ids, Wire(ChatTemplate(TestTokenizer()).Render(msgs, opt, true)));
  EXPECT_EQ(As<tk::Failed>(s.Handle(tk::RenderChat{7, "{\"role\":\"user\"}\n", true, "", "", tk::ToolChoice::kAuto, false, ""})).error, tk::Error::kBadInput);
  EXPECT_EQ(As<tk::Failed>(s.Handle(tk::RenderChat{8, hist, true, "extreme", "", tk::ToolChoice::kAuto, false, ""})).error, tk::Error::kUnsupported);
}

// RenderChat's tool fields reach the template: tools, tool_choice, continue_final.
TEST(TokenizerService, RenderChatWithTools) {
  TokenizerService s(TestTokenizer());
  const std::string tools = R"([{"type":"function","function":{"name":"f"}}])";
  const std::string hist =
      "{\"role\":\"user\",\"content\":\"q\"}\n"
      "{\"role\":\"assistant\",\"content\":\"\",\"tool_calls\":[{\"id\":\"c1\",\"type\":\"function\","
      "\"function\":{\"name\":\"f\",\"arguments\":\"{\\\"a\\\": 1}\"}}]}\n";
  const std::vector<ChatMessage> msgs = {{Role::kUser, "q", std::nullopt},
                                         {Role::kAssistant, "", std::nullopt, {{"c1", "f", "{\"a\": 1}"}}}};
  ChatOptions opt;
  opt.tools_json = tools;
  opt.continue_final = true;
  const auto& open = As<tk::EncodedIds>(s.Handle(tk::RenderChat{9, hist, true, "", tools, tk::ToolChoice::kAuto, true, ""}));
  EXPECT_EQ(open.ids, Wire(ChatTemplate(TestTokenizer()).Render(msgs, opt, false)));
  const std::string answered = hist + "{\"role\":\"tool\",\"content\":\"r\",\"tool_call_id\":\"c1\"}\n";
  std::vector<ChatMessage> with_result = msgs;
  with_result.push_back({Role::kTool, "r", std::nullopt, {}, std::string("c1")});
  opt.continue_final = false;
  opt.tool_choice = ToolChoice::kNone;
  const auto& next = As<tk::EncodedIds>(s.Handle(tk::RenderChat{10, answered, true, "", tools, tk::ToolChoice::kNone, false, ""}));
  EXPECT_EQ(next.ids, Wire(ChatTemplate(TestTokenizer()).Render(with_result, opt, true)));
  EXPECT_NE(next.ids, As<tk::EncodedIds>(s.Handle(tk::RenderChat{11, answered, true, "", tools, tk::ToolChoice::kAuto, false, ""})).ids);
  EXPECT_EQ(As<tk::Failed>(s.Handle(tk::RenderChat{12, answered, true, "", "{oops", tk::ToolChoice::kAuto, false, ""})).error,
            tk::Error::kBadInput);
}

TEST(TokenizerService, RepliesFromARequesterAreRejected) {
  TokenizerService s(TestTokenizer());
  EXPECT_FALSE(s.Handle(tk::EncodedIds{1, {1}}).has_value());
  EXPECT_FALSE(s.Handle(tk::Decoded{1, "x"}).has_value());
  EXPECT_FALSE(s.Handle(tk::Failed{1, tk::Error::kBadInput, "x"}).has_value());
  EXPECT_EQ(s.counters().rejected, 3u);
  EXPECT_EQ(s.counters().requests, 0u);
}

// ---- the real process ----

class ServeProcess : public ::testing::Test {
 protected:
  void SetUp() override {
    vocab_ = fs::path(launcher_.Endpoint("x").substr(6)).parent_path() / "vocab";
    fs::create_directories(vocab_);
    std::ofstream(vocab_ / "tiktoken.model") << testing::TestModelText();
    std::ofstream(vocab_ / "tokenizer_config.json") << testing::TestConfigText();
  }
  test::Child Start(const std::string& vocab) {
    return test::Child({K3_TOKENIZER_BIN, "serve", "--vocab", vocab, "--control", launcher_.Endpoint("control"),
                        "--bind", launcher_.Endpoint("tokenizer")},
                       launcher_.StderrPath("tokenizer"));
  }
  test::FakeLauncher launcher_;
  fs::path vocab_;
};

TEST_F(ServeProcess, AnswersRejectsMalformedAndKeepsAnswering) {
  test::Child c = Start(vocab_.string());
  ASSERT_TRUE(launcher_.WaitReady("tokenizer")) << launcher_.ReadStderr("tokenizer");
  test::Peer peer(launcher_.ctx(), launcher_.Endpoint("tokenizer"));
  const std::string text = "hello world";
  peer.Send(tk::Encode{1, text, false});
  auto r = peer.Recv(ipc::DecodeTokenizer);
  ASSERT_TRUE(r.has_value()) << launcher_.ReadStderr("tokenizer");
  EXPECT_EQ(std::get<tk::EncodedIds>(*r).ids, Wire(TestTokenizer().Encode(text, false)));

  // Malformed: one frame of junk, a kind frame with a truncated payload, another protocol,
  // and a reply type the service never accepts.
  peer.SendRaw({"junk"});
  const auto good = ipc::Encode(tk::Encode{2, text, false});
  const auto kind = good.kind.bytes();
  peer.SendRaw({std::string(kind.begin(), kind.end()), std::string(good.payload.begin(), good.payload.end() - 3)});
  peer.Send(ipc::ATokenMessage(1, 2, 3));
  peer.Send(tk::Decoded{9, "x"});

  peer.Send(tk::Decode{3, Wire(TestTokenizer().Encode(text, false)), false, false});
  r = peer.Recv(ipc::DecodeTokenizer);
  ASSERT_TRUE(r.has_value()) << launcher_.ReadStderr("tokenizer");
  ASSERT_TRUE(std::holds_alternative<tk::Decoded>(*r));
  EXPECT_EQ(std::get<tk::Decoded>(*r).request_id, 3u);
  EXPECT_EQ(std::get<tk::Decoded>(*r).text, text);

  auto stats = launcher_.ShutdownAndStats("tokenizer");
  EXPECT_EQ(c.Wait(), 0);
  EXPECT_EQ(stats["rejected_messages"], 4);
  EXPECT_EQ(stats["requests"], 2);
  EXPECT_EQ(stats["encoded_bytes"], static_cast<double>(text.size()));
  const std::string err = launcher_.ReadStderr("tokenizer");
  EXPECT_NE(err.find("[tokenizer] stats: 2 requests"), std::string::npos) << err;
  EXPECT_NE(err.find("4 rejected messages"), std::string::npos) << err;
}

TEST_F(ServeProcess, SigtermExitsFiveWithStats) {
  test::Child c = Start(vocab_.string());
  ASSERT_TRUE(launcher_.WaitReady("tokenizer")) << launcher_.ReadStderr("tokenizer");
  ::kill(c.pid(), SIGTERM);
  bool stats = false;
  while (!stats) {
    auto m = launcher_.Control(5s);
    if (!m) break;
    stats = std::holds_alternative<ipc::control::Stats>(m->message);
  }
  EXPECT_TRUE(stats);
  EXPECT_EQ(c.Wait(), 5);
}

TEST_F(ServeProcess, BadVocabularyIsDeadWithBadInput) {
  std::ofstream(vocab_ / "tiktoken.model") << "not base64 at all\n";
  test::Child c = Start(vocab_.string());
  std::optional<ipc::control::Dead> dead;
  while (auto m = launcher_.Control(10s)) {
    if (const auto* d = std::get_if<ipc::control::Dead>(&m->message)) {
      dead = *d;
      break;
    }
  }
  ASSERT_TRUE(dead.has_value()) << launcher_.ReadStderr("tokenizer");
  EXPECT_EQ(dead->exit_code, kExitBadInput);
  EXPECT_NE(dead->reason.find("tiktoken.model"), std::string::npos) << dead->reason;
  EXPECT_EQ(c.Wait(), kExitBadInput);
}

TEST_F(ServeProcess, UsageErrors) {
  test::Child c({K3_TOKENIZER_BIN, "serve", "--vocab", vocab_.string()}, launcher_.StderrPath("usage"));
  EXPECT_EQ(c.Wait(), kExitUsage);
}

}  // namespace
}  // namespace k3::tok
