// services/server/max_tokens: the server's default and limit for a request's max_tokens.
#include "services/server/max_tokens.h"

#include <gtest/gtest.h>

namespace k3::server {
namespace {

RequestSpec With(std::optional<int64_t> n, const char* field = "max_tokens") {
  RequestSpec r;
  r.max_tokens = n;
  r.max_tokens_field = field;
  return r;
}

TEST(MaxTokens, AboveTheLimitIs400NamingTheFieldAndTheLimit) {
  RequestSpec r = With(9000, "max_completion_tokens");
  const std::optional<HttpError> e = ApplyMaxTokens(r, {0, 8192});
  ASSERT_TRUE(e);
  EXPECT_EQ(e->status, 400);
  EXPECT_EQ(e->message, "'max_completion_tokens' 9000 is above this server's limit of 8192 (max_tokens_limit)");
  RequestSpec at = With(8192);
  EXPECT_FALSE(ApplyMaxTokens(at, {0, 8192}));
  EXPECT_EQ(*at.max_tokens, 8192);
  RequestSpec free = With(1 << 30);
  EXPECT_FALSE(ApplyMaxTokens(free, {100, 0}));  // no limit: the request's own
  EXPECT_EQ(*free.max_tokens, 1 << 30);
}

TEST(MaxTokens, WithoutMaxTokensTheDefaultThenTheLimitThenTheContext) {
  RequestSpec a = With(std::nullopt);
  EXPECT_FALSE(ApplyMaxTokens(a, {256, 8192}));
  EXPECT_EQ(a.max_tokens, std::optional<int64_t>(256));
  RequestSpec b = With(std::nullopt);
  EXPECT_FALSE(ApplyMaxTokens(b, {0, 8192}));
  EXPECT_EQ(b.max_tokens, std::optional<int64_t>(8192));
  RequestSpec c = With(std::nullopt);
  EXPECT_FALSE(ApplyMaxTokens(c, {0, 0}));
  EXPECT_FALSE(c.max_tokens);  // the engine's: up to the context
}

TEST(MaxTokens, PolicyProblems) {
  EXPECT_EQ(MaxTokensPolicyProblem({0, 0}), "");
  EXPECT_EQ(MaxTokensPolicyProblem({512, 512}), "");
  EXPECT_EQ(MaxTokensPolicyProblem({512, 0}), "");
  EXPECT_EQ(MaxTokensPolicyProblem({513, 512}), "max_tokens_default 513 is above max_tokens_limit 512");
  EXPECT_NE(MaxTokensPolicyProblem({-1, 0}), "");
  EXPECT_NE(MaxTokensPolicyProblem({0, -1}), "");
}

}  // namespace
}  // namespace k3::server
