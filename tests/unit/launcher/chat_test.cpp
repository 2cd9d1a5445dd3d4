// The chat REPL's pure parts (launcher/chat.h, chat_turn.h, chat_saved.h): channel splitting
// of generated ids, the new ids of a turn on a kept state, the turn's plan and Generate,
// commands, the /save extra, UTF-8 hold-back, the JSONL history; and the chat options (TOML
// keys, flag rules).
#include "launcher/chat.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <functional>

#include "common/error.h"
#include "launcher/chat_saved.h"
#include "launcher/chat_turn.h"
#include "launcher/options.h"

namespace k3::launch {
namespace {

using Ch = ChannelSplitter::Channel;

ChatControlIds Ids() {
  ChatControlIds c;
  c.open = 100, c.close = 101, c.sep = 102, c.eom = 103, c.eos = 104;
  c.think = {7};
  c.response = {8, 9};
  c.message = {5};
  return c;
}

TEST(ChatSplitter, ThinkThenResponseThenEnd) {
  const ChatControlIds ids = Ids();
  ChannelSplitter s(ids, /*thinking=*/true);
  // reasoning 1 2 <|close|>think<|sep|><|open|>response<|sep|> 3 <|close|>response<|sep|>
  // <|close|>message<|sep|><|end_of_msg|> (message = 5)
  const std::vector<std::pair<int32_t, Ch>> seq = {
      {1, Ch::kThink}, {2, Ch::kThink}, {101, Ch::kNone}, {7, Ch::kNone}, {102, Ch::kNone},
      {100, Ch::kNone}, {8, Ch::kNone}, {9, Ch::kNone}, {102, Ch::kNone}, {3, Ch::kResponse},
      {101, Ch::kNone}, {8, Ch::kNone}, {9, Ch::kNone}, {102, Ch::kNone}, {101, Ch::kNone},
      {5, Ch::kNone}, {102, Ch::kNone}, {4, Ch::kNone}, {103, Ch::kNone}};
  for (auto [id, want] : seq) EXPECT_EQ(s.Push(id), want) << id;
  EXPECT_TRUE(s.ended());
  EXPECT_EQ(s.Push(1), Ch::kNone);  // nothing after the end
}

TEST(ChatSplitter, ThinkingOffStartsInResponseAndEosEnds) {
  const ChatControlIds ids = Ids();
  ChannelSplitter s(ids, false);
  EXPECT_EQ(s.Push(1), Ch::kResponse);
  EXPECT_FALSE(s.ended());
  EXPECT_EQ(s.Push(104), Ch::kNone);
  EXPECT_TRUE(s.ended());
  // An unknown channel (or a "think" tag that only shares a prefix) belongs to neither.
  ChannelSplitter u(ids, false);
  for (int32_t id : {100, 8, 102}) u.Push(id);
  EXPECT_EQ(u.Push(1), Ch::kNone);
  for (int32_t id : {100, 8, 9, 102}) u.Push(id);
  EXPECT_EQ(u.Push(1), Ch::kResponse);
  for (int32_t id : {100, 8, 9, 5, 102}) u.Push(id);
  EXPECT_EQ(u.Push(1), Ch::kNone);
}

TEST(ChatNewTurn, IdsAfterTheReplysEnd) {
  const int32_t eom = 103;
  const std::vector<int32_t> prev = {1, 2, 3};
  // previous rendering, the reply as re-rendered (any ids), its end, the new user turn
  EXPECT_EQ(NewTurnIds({1, 2, 3, 50, 51, 103, 60, 61}, prev, eom), (std::vector<int32_t>{60, 61}));
  EXPECT_EQ(NewTurnIds({1, 2, 4, 50, 103, 60}, prev, eom), std::nullopt);  // not a prefix
  EXPECT_EQ(NewTurnIds({1, 2, 3, 50}, prev, eom), std::nullopt);           // no end
  EXPECT_EQ(NewTurnIds({1, 2, 3, 50, 103}, prev, eom), std::nullopt);      // nothing new
  EXPECT_EQ(NewTurnIds({103, 7}, {}, eom), std::nullopt);                  // no previous turn
}

TEST(ChatUtf8, HoldsBackAnIncompleteCharacterOnly) {
  EXPECT_EQ(CompleteUtf8Prefix("abc"), 3u);
  EXPECT_EQ(CompleteUtf8Prefix("a\xC3"), 1u);              // é cut after its lead byte
  EXPECT_EQ(CompleteUtf8Prefix("a\xC3\xA9"), 3u);
  EXPECT_EQ(CompleteUtf8Prefix("\xE2\x82"), 0u);           // € cut
  EXPECT_EQ(CompleteUtf8Prefix("\xF0\x9F\x98\x80"), 4u);   // a whole 4-byte character
  EXPECT_EQ(CompleteUtf8Prefix("a\xFF"), 2u);              // ill-formed: nothing to wait for
  EXPECT_EQ(CompleteUtf8Prefix(""), 0u);
}

TEST(ChatHistory, JsonlLines) {
  const std::string h = HistoryJsonl({{"system", "Be \"brief\"", std::nullopt},
                                      {"user", "a\nb", std::nullopt},
                                      {"assistant", "ok", std::string("hm")}});
  EXPECT_EQ(h, "{\"content\":\"Be \\\"brief\\\"\",\"role\":\"system\"}\n"
               "{\"content\":\"a\\nb\",\"role\":\"user\"}\n"
               "{\"content\":\"ok\",\"reasoning_content\":\"hm\",\"role\":\"assistant\"}\n");
}

TEST(ChatReportJson, TurnsAndEnd) {
  ChatResult r;
  r.end = ChatEnd::kEndOfInput;
  r.turns.push_back({10, 0, 5, "r", "x\xFF", "stop", 0.5, 0.125});
  r.turns.push_back({3, 15, 0, "", "", "cancelled", 0.25, std::nullopt});  // cancelled before any id
  const nlohmann::json j = ChatReport(r);
  EXPECT_EQ(j["mode"], "chat");
  EXPECT_EQ(j["end"], "end_of_input");
  EXPECT_EQ(j["turns"][0]["prompt_tokens"], 10);
  EXPECT_EQ(j["turns"][0]["finish_reason"], "stop");
  EXPECT_EQ(j["turns"][0]["response"], "x\xEF\xBF\xBD");  // U+FFFD for the ill-formed byte
  EXPECT_EQ(j["turns"][0]["first_token_seconds"], 0.125);
  EXPECT_EQ(j["turns"][0]["seconds"], 0.5);
  EXPECT_TRUE(j["turns"][1]["first_token_seconds"].is_null());
}

int ErrorCode(const std::function<void()>& f) {
  try {
    f();
    return 0;
  } catch (const Error& e) {
    return e.code();
  }
}

TEST(ChatOptions, TomlKeysAndRules) {
  LaunchOptions o;
  o.budget = "1G";
  o.model = "/m";
  ApplyToml("chat = true\nsystem = \"Be brief.\"\nthinking_effort = \"low\"\nreply_limit = 7\n", "t.toml", "/", o);
  EXPECT_TRUE(o.chat);
  EXPECT_EQ(o.reply_limit, 7);
  EXPECT_EQ(o.system, "Be brief.");
  EXPECT_EQ(o.thinking_effort, "low");
  EXPECT_EQ(ErrorCode([&] { CheckOptions(o); }), 0);
  LaunchOptions bad = o;
  bad.thinking_effort = "medium";  // refused, as by the released encoder
  EXPECT_EQ(ErrorCode([&] { CheckOptions(bad); }), kExitUsage);
  bad = o;
  bad.no_think = true;  // contradicts an explicit effort
  EXPECT_EQ(ErrorCode([&] { CheckOptions(bad); }), kExitUsage);
  bad = o;
  bad.chat = false;  // chat options without --chat
  EXPECT_EQ(ErrorCode([&] { CheckOptions(bad); }), kExitUsage);
  bad = o;
  bad.reply_limit = -1;
  EXPECT_EQ(ErrorCode([&] { CheckOptions(bad); }), kExitUsage);
  bad = o;
  bad.prompt = "hi";  // the chat takes its prompts from the terminal
  EXPECT_EQ(ErrorCode([&] { CheckOptions(bad); }), kExitUsage);
  LaunchOptions t;
  EXPECT_EQ(ErrorCode([&] { ApplyToml("chat = 1\n", "t.toml", "/", t); }), kExitUsage);
  EXPECT_EQ(ErrorCode([&] { ApplyToml("no_think = \"yes\"\n", "t.toml", "/", t); }), kExitUsage);
}

KeptConversation Kept(std::vector<int32_t> last, int64_t ids, bool valid, std::vector<int32_t> closing = {}) {
  return {std::move(last), std::move(closing), ids, valid};
}

TEST(ChatTurn, AValidKeptStateSendsOnlyTheNewIds) {
  const int32_t eom = 103;
  const std::vector<int32_t> last = {1, 2, 3};
  const std::vector<int32_t> now = {1, 2, 3, 50, 51, 103, 60, 61};  // the reply 50 51, then the new turn
  TurnPlan p = PlanTurn(now, Kept(last, 6, true), eom, /*context=*/20);
  EXPECT_EQ(p.send, std::vector<int32_t>({60, 61}));
  EXPECT_TRUE(p.keep);
  EXPECT_EQ(p.reused, 6);
  EXPECT_EQ(p.room, 20 - 6 - 2);
  // A state that is not the conversation (or nothing kept): the whole conversation again.
  for (const TurnPlan& q : {PlanTurn(now, Kept(last, 6, false), eom, 20), PlanTurn(now, Kept(last, 0, true), eom, 20),
                            PlanTurn(now, Kept({1, 2, 4}, 6, true), eom, 20)}) {
    EXPECT_EQ(q.send, now);
    EXPECT_FALSE(q.keep);
    EXPECT_EQ(q.reused, 0);
    EXPECT_EQ(q.room, 20 - 8);
  }
  EXPECT_LT(PlanTurn(now, Kept(last, 6, false), eom, 8).room, 1);  // the context is full
}

TEST(ChatTurn, AReplyCutShortIsClosedThenTheNewTurnAppended) {
  const std::vector<int32_t> last = {1, 2, 3};
  // The state holds 1 2 3 then the cut reply 50 (its last id not fed yet): 4 ids. The new
  // rendering has the reply re-tokenized (50 52) and closed; the state gets the closing instead.
  const std::vector<int32_t> now = {1, 2, 3, 50, 52, 101, 8, 9, 102, 101, 5, 102, 103, 60, 61};
  const TurnPlan p = PlanTurn(now, Kept(last, 4, true, {101, 8, 9, 102, 101, 5, 102, 103}), 103, 30);
  EXPECT_EQ(p.send, std::vector<int32_t>({101, 8, 9, 102, 101, 5, 102, 103, 60, 61}));
  EXPECT_TRUE(p.keep);
  EXPECT_EQ(p.reused, 4);
  EXPECT_EQ(p.room, 30 - 4 - 10);
}

TEST(ChatTurn, ClosingIdsAfterACut) {
  const ChatControlIds ids = Ids();
  using V = std::vector<int32_t>;
  const V think_to_response = {101, 7, 102, 100, 8, 9, 102}, end = {101, 8, 9, 102, 101, 5, 102, 103};
  auto cat = [](V a, const V& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
  };
  // Thinking on, cut in the reasoning (nothing generated yet, or some of it): the whole rest.
  EXPECT_EQ(ReplyClosing({}, ids, true), cat(think_to_response, end));
  EXPECT_EQ(ReplyClosing({1, 2, 7, 8}, ids, true), cat(think_to_response, end));  // tag-name ids in text are text
  // ... inside the boundary, in the answer, inside the end.
  EXPECT_EQ(ReplyClosing({1, 101, 7}, ids, true), cat({102, 100, 8, 9, 102}, end));
  EXPECT_EQ(ReplyClosing(cat({1}, think_to_response), ids, true), end);
  EXPECT_EQ(ReplyClosing(cat(cat({1}, think_to_response), {3, 4}), ids, true), end);
  EXPECT_EQ(ReplyClosing(cat(cat({1}, think_to_response), {3, 101, 8, 9, 102, 101}), ids, true), V({5, 102, 103}));
  // Thinking off: from the answer.
  EXPECT_EQ(ReplyClosing({3}, ids, false), end);
  EXPECT_EQ(ReplyClosing({}, ids, false), end);
  // A reply that ended (its end id, or [EOS] anywhere): nothing to close.
  EXPECT_EQ(ReplyClosing(cat(cat({1}, think_to_response), cat({3}, end)), ids, true), V{});
  EXPECT_EQ(ReplyClosing({1, 2, 104}, ids, true), V{});
  EXPECT_EQ(ReplyClosing({1, 103}, ids, false), V{});
  // Control ids where the template has none: no closing continues it.
  EXPECT_EQ(ReplyClosing({1, 100, 7, 102}, ids, true), std::nullopt);  // a second <|open|>think<|sep|>
  EXPECT_EQ(ReplyClosing({1, 101, 8}, ids, true), std::nullopt);       // </response> in the reasoning
  EXPECT_EQ(ReplyClosing({3, 102}, ids, false), std::nullopt);
  EXPECT_EQ(ReplyClosing({3, 101, 7}, ids, false), std::nullopt);  // closes think with thinking off
}

TEST(ChatTurn, AfterATurnTheStateIsExtendedFromTheIdsFed) {
  const ChatControlIds ids = Ids();
  TurnPlan p;
  p.send = {60, 61, 62};
  p.reused = 10;
  const std::vector<int32_t> rendered = {1, 2, 3};
  // Cut in the reasoning: 10 + 3 sent + 2 generated (the last one not fed yet) in compute's state.
  KeptConversation k = AfterTurn(p, rendered, {40, 41}, 15, ids, true);
  EXPECT_TRUE(k.valid);
  EXPECT_EQ(k.ids, 15);
  EXPECT_EQ(k.last_render, rendered);
  EXPECT_EQ(k.closing, std::vector<int32_t>({101, 7, 102, 100, 8, 9, 102, 101, 8, 9, 102, 101, 5, 102, 103}));
  // Ended by itself: nothing to close.
  k = AfterTurn(p, rendered, {3, 101, 8, 9, 102, 101, 5, 102, 103}, 22, ids, false);
  EXPECT_TRUE(k.valid);
  EXPECT_TRUE(k.closing.empty());
  // A Cancel during the prompt: compute holds part of it only; the next turn starts afresh.
  EXPECT_FALSE(AfterTurn(p, rendered, {}, 11, ids, true).valid);
  // Ids the template cannot close.
  EXPECT_FALSE(AfterTurn(p, rendered, {40, 102}, 15, ids, true).valid);
  // An older compute without Done.position: what was sent and generated.
  EXPECT_EQ(AfterTurn(p, rendered, {40, 41}, 0, ids, true).ids, 15);
}

TEST(ChatTurn, TheGenerateRunsToTheEndIdWithinTheRoom) {
  LaunchOptions o;
  o.gen = 5;  // --gen is for one-shot runs: not a chat reply's limit
  o.context = 64;
  o.stop_ids = {7, 103};
  TurnPlan p;
  p.send = {60, 61};
  p.keep = true;
  p.room = 10;
  const ipc::compute::Generate g = TurnGenerate(o, p, Ids(), 4, o.sampling);
  EXPECT_EQ(g.request_id, 4u);
  EXPECT_EQ(g.ids, p.send);
  EXPECT_EQ(g.gen, 10);  // the room, not --gen
  EXPECT_EQ(g.stop_ids, std::vector<int32_t>({7, 103, 104}));  // eom once, then eos
  EXPECT_TRUE(g.keep_state);
  EXPECT_EQ(g.max_positions, 64);
  ipc::compute::Sampling set;  // the session's sampling (/set), not the options'
  set.temperature = 0.7f;
  set.seed = 99;
  EXPECT_EQ(TurnGenerate(o, p, Ids(), 4, set).sampling, set);
  p.room = 1000;
  EXPECT_EQ(TurnGenerate(o, p, Ids(), 5, o.sampling).gen, 1000);
  o.reply_limit = 100;
  EXPECT_EQ(TurnGenerate(o, p, Ids(), 5, o.sampling).gen, 100);
  p.room = 30;
  EXPECT_EQ(TurnGenerate(o, p, Ids(), 5, o.sampling).gen, 30);
  EXPECT_EQ(KeptAfterTurn(40, 6, 2, 9), 40);
  EXPECT_EQ(KeptAfterTurn(0, 6, 2, 9), 17);
}

// The prefix snapshot a turn asks for: where the conversation before the new user message ends
// (for a first turn, the preamble every chat with these settings shares).
TEST(ChatTurn, TheSnapshotPointIsWhereTheNewestMessageStarts) {
  const int32_t eom = 103;
  const std::vector<int32_t> first = {1, 2, 103, 5, 6, 103, 60, 61, 103, 70, 71};  // system, effort, user, prompt
  EXPECT_EQ(BeforeNewestMessage(first, eom), 6);
  EXPECT_EQ(BeforeNewestMessage({60, 61, 103, 70, 71}, eom), 0);  // a kept turn's ids: nothing before
  EXPECT_EQ(BeforeNewestMessage({60, 61, 70}, eom), 0);
  LaunchOptions o;
  TurnPlan p;
  p.send = first;
  p.room = 10;
  EXPECT_EQ(TurnGenerate(o, p, Ids(), 1, o.sampling).snapshot_at, 6);
  p.send = {60, 61, 103, 70, 71};
  p.keep = true;
  EXPECT_EQ(TurnGenerate(o, p, Ids(), 2, o.sampling).snapshot_at, 0);
}

TEST(ChatTurn, SummaryLine) {
  ChatTurn t{9, 57, 12, "", "", "stop", 2.314, 0.0421};
  EXPECT_EQ(TurnSummary(t, 0), "[chat] 12 tokens (stop) in 2.31 s, first token 0.042 s, 4.8 tokens/s; 57 ids reused, 9 prefilled");
  // 11 ids after the first in 2.314 - 0.0421 s; one id has no rate.
  ChatTurn one{9, 57, 1, "", "", "stop", 0.5, 0.5};
  EXPECT_EQ(TurnSummary(one, 0), "[chat] 1 tokens (stop) in 0.50 s, first token 0.500 s; 57 ids reused, 9 prefilled");
  t.finish_reason = "length";
  EXPECT_EQ(TurnSummary(t, 12).substr(0, 44), "[chat] 12 tokens (--reply-limit 12 reached) ");
  EXPECT_EQ(TurnSummary(t, 0).substr(0, 37), "[chat] 12 tokens (the context is full");
  t.finish_reason = "cancelled";
  t.generated_tokens = 0;
  t.first_token_seconds.reset();
  EXPECT_EQ(TurnSummary(t, 0), "[chat] 0 tokens (stopped by Ctrl-C) in 2.31 s, no token; 57 ids reused, 9 prefilled");
}

TEST(ChatTurn, CommandsAndTheirArguments) {
  EXPECT_EQ(ParseChatCommand("/quit").cmd, "/quit");
  EXPECT_EQ(ParseChatCommand("/quit").arg, "");
  const ChatCommand save = ParseChatCommand("/save   my chat.k3state  ");
  EXPECT_EQ(save.cmd, "/save");
  EXPECT_EQ(save.arg, (std::filesystem::current_path() / "my chat.k3state").string());
  EXPECT_EQ(ParseChatCommand("/load /tmp/a").arg, "/tmp/a");
  EXPECT_EQ(ParseChatCommand("/frob  x ").arg, "x");  // only /save and /load name files
}

TEST(ChatSaved, RoundTripAndRefusals) {
  SavedChat s;
  s.history = {{"system", "be brief", std::nullopt}, {"user", "hi", std::nullopt}, {"assistant", "hello", "greet"}};
  s.thinking = true;
  s.effort = "high";
  s.last_render = {1, 2, 3};
  s.state_valid = true;
  s.closing = {101, 102};
  const SavedChat back = ParseSavedChat(SavedChatExtra(s));
  ASSERT_EQ(back.history.size(), 3u);
  EXPECT_EQ(back.history[2].role, "assistant");
  EXPECT_EQ(back.history[2].content, "hello");
  EXPECT_EQ(back.history[2].reasoning, std::optional<std::string>("greet"));
  EXPECT_FALSE(back.history[1].reasoning);
  EXPECT_EQ(back.effort, "high");
  EXPECT_EQ(back.last_render, s.last_render);
  EXPECT_TRUE(back.thinking && back.state_valid);
  EXPECT_EQ(back.closing, s.closing);
  EXPECT_NE(SavedChatExtra(s).find("\"k3_chat\":2"), std::string::npos);
  // Version 1 (before `closing`): its valid states ended by themselves.
  const SavedChat v1 = ParseSavedChat(
      R"({"k3_chat": 1, "history": "", "thinking": false, "thinking_effort": "max", "last_render": [4], "state_valid": true})");
  EXPECT_TRUE(v1.state_valid);
  EXPECT_TRUE(v1.closing.empty());
  EXPECT_EQ(v1.last_render, std::vector<int32_t>({4}));
  EXPECT_THROW(ParseSavedChat("{}"), std::exception);  // a state file saved by a one-shot run
  EXPECT_THROW(ParseSavedChat(R"({"k3_chat": 3})"), std::exception);
  EXPECT_THROW(ParseSavedChat(R"({"k3_chat": 1, "history": ""})"), std::exception);  // fields missing
  EXPECT_THROW(ParseSavedChat(  // version 2 without its closing
                   R"({"k3_chat": 2, "history": "", "thinking": false, "thinking_effort": "max", "last_render": [4], "state_valid": true})"),
               std::exception);
  EXPECT_THROW(ParseSavedChat("not json"), std::exception);
}

}  // namespace
}  // namespace k3::launch
