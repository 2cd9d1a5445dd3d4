// The chat control ids from the tokenizer's answers (common/chat_control_ids.h), the one check
// k3-launch --chat and k3-server share.
#include "common/chat_control_ids.h"

#include <gtest/gtest.h>

namespace k3 {
namespace {

std::map<std::string, std::vector<int32_t>> K3Answers() {
  return {{"<|open|>", {10}}, {"<|close|>", {11}}, {"<|sep|>", {12}}, {"<|end_of_msg|>", {13}},
          {"[EOS]", {14}},    {"think", {3, 4}},   {"response", {5}}, {"message", {6, 2}},
          {"tools", {7, 8}}};
}

TEST(ChatControlIds, TheQueriesAreTheFiveSpecialTokensThenTheSixTagNames) {
  std::vector<std::string> special, plain;
  for (const ControlIdQuery& q : ControlIdQueries()) (q.special ? special : plain).push_back(q.text);
  EXPECT_EQ(special, std::vector<std::string>({"<|open|>", "<|close|>", "<|sep|>", "<|end_of_msg|>", "[EOS]"}));
  EXPECT_EQ(plain, std::vector<std::string>({"think", "response", "message", "tools", "call", "json"}));
}

TEST(ChatControlIds, FromAK3Vocabulary) {
  const auto r = ControlIdsFrom(K3Answers(), 100);
  ASSERT_TRUE(std::holds_alternative<ChatControlIds>(r));
  const ChatControlIds& c = std::get<ChatControlIds>(r);
  EXPECT_EQ(c.open, 10);
  EXPECT_EQ(c.close, 11);
  EXPECT_EQ(c.sep, 12);
  EXPECT_EQ(c.eom, 13);
  EXPECT_EQ(c.eos, 14);
  EXPECT_EQ(c.think, std::vector<int32_t>({3, 4}));
  EXPECT_EQ(c.response, std::vector<int32_t>({5}));
  EXPECT_EQ(c.message, std::vector<int32_t>({6, 2}));
  EXPECT_EQ(c.tools, std::vector<int32_t>({7, 8}));
}

TEST(ChatControlIds, ASpecialTokenThatIsNotOneIdOrOutsideTheVocabulary) {
  auto a = K3Answers();
  a["<|sep|>"] = {1, 2};  // not a special token of this tokenizer: encoded as text
  auto r = ControlIdsFrom(a, 100);
  ASSERT_TRUE(std::holds_alternative<ControlIdProblem>(r));
  EXPECT_EQ(std::get<ControlIdProblem>(r).token, "<|sep|>");
  EXPECT_FALSE(std::get<ControlIdProblem>(r).out_of_vocab);
  a = K3Answers();
  a.erase("[EOS]");  // never answered (a Failed reply)
  EXPECT_EQ(std::get<ControlIdProblem>(ControlIdsFrom(a, 100)).token, "[EOS]");
  r = ControlIdsFrom(K3Answers(), 14);  // [EOS] is id 14: outside [0, 14)
  ASSERT_TRUE(std::holds_alternative<ControlIdProblem>(r));
  EXPECT_EQ(std::get<ControlIdProblem>(r).token, "[EOS]");
  EXPECT_TRUE(std::get<ControlIdProblem>(r).out_of_vocab);
  EXPECT_EQ(std::get<ControlIdProblem>(r).id, 14);
}

}  // namespace
}  // namespace k3
