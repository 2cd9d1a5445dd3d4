// services/server/body_limits and the bounded, strict parse of a request body: docs/server.md
// "Limits" (the bytes of a body however framed; nesting depth; the size once parsed; repeated
// keys) and the range messages that show a value as the client sent it.
#include "services/server/body_limits.h"

#include <gtest/gtest.h>

#include <string>
#include <variant>

#include "services/server/openai_request.h"

namespace k3::server {
namespace {

HttpError RefusedWith(const std::string& body, const JsonLimits& limits = {}) {
  auto r = ParseRequest(body, Endpoint::kCompletions, RequestDefaults{}, limits);
  if (!std::holds_alternative<HttpError>(r)) {
    ADD_FAILURE() << "accepted: " << body.substr(0, 200);
    return {};
  }
  EXPECT_EQ(std::get<HttpError>(r).status, 400);
  return std::get<HttpError>(r);
}

bool Accepted(const std::string& body, const JsonLimits& limits) {
  return std::holds_alternative<RequestSpec>(ParseRequest(body, Endpoint::kCompletions, RequestDefaults{}, limits));
}

std::string Nested(size_t levels) { return std::string(levels, '[') + std::string(levels, ']'); }

TEST(BodyLimits, BoundedBodyKeepsUpToTheLimitAndRefusesTheFirstByteOver) {
  const auto t0 = BoundedBody::Clock::now();
  BoundedBody b(10, t0 + std::chrono::seconds(1));
  EXPECT_TRUE(b.Add("12345", 5, t0));
  EXPECT_TRUE(b.Add("67890", 5, t0));  // exactly the limit
  EXPECT_FALSE(b.over());
  EXPECT_FALSE(b.Add("x", 1, t0));
  EXPECT_TRUE(b.over());
  EXPECT_FALSE(b.Add("", 0, t0));  // stays refused
  EXPECT_EQ(b.text(), "1234567890");
  EXPECT_FALSE(b.late());
}

TEST(BodyLimits, ABodyStillArrivingAtItsDeadlineIsRefused) {
  const auto t0 = BoundedBody::Clock::now();
  BoundedBody b(100, t0 + kBodyTimeout);
  EXPECT_TRUE(b.Add("a", 1, t0 + kBodyTimeout - std::chrono::seconds(1)));  // a byte now and then
  EXPECT_FALSE(b.Add("b", 1, t0 + kBodyTimeout + std::chrono::milliseconds(1)));
  EXPECT_TRUE(b.late());
  EXPECT_FALSE(b.over());
  EXPECT_FALSE(b.Add("c", 1, t0));  // stays refused
  EXPECT_EQ(b.text(), "a");
}

TEST(BodyLimits, DepthIsBoundedAt64OpenArraysAndObjects) {
  const JsonLimits limits = RequestJsonLimits(1 << 20);
  // The body object is one level: 63 arrays inside it make 64.
  EXPECT_TRUE(Accepted(R"({"model": "m", "prompt": "x", "extra": )" + Nested(63) + "}", limits));
  const HttpError e = RefusedWith(R"({"model": "m", "prompt": "x", "extra": )" + Nested(64) + "}", limits);
  EXPECT_NE(e.message.find("nested deeper than 64"), std::string::npos) << e.message;
  // A megabyte of '[' stops at the limit (no deep recursion, no giant tree).
  RefusedWith(std::string(1 << 20, '['), limits);
}

TEST(BodyLimits, ParsedSizeIsBoundedByTheBodyLimit) {
  // 20000 empty arrays: 3 bytes of text, 56 bytes once parsed each (value, vector, allocation).
  std::string arrays;
  for (int i = 0; i < 20000; ++i) arrays += i ? ",[]" : "[]";
  const std::string body = R"({"model": "m", "prompt": "x", "extra": [)" + arrays + "]}";
  const JsonLimits limits = RequestJsonLimits(body.size());
  const HttpError e = RefusedWith(body, limits);
  EXPECT_NE(e.message.find("bytes once parsed"), std::string::npos) << e.message;
  // A prompt of one-digit ids ("0,": 2 bytes of text, 16 parsed) fits 8 per byte.
  std::string ids;
  for (int i = 0; i < 20000; ++i) ids += i ? ",0" : "0";
  const std::string prompt = R"({"model": "m", "prompt": [)" + ids + "]}";
  EXPECT_TRUE(Accepted(prompt, RequestJsonLimits(prompt.size())));
}

TEST(BodyLimits, RepeatedKeysAreRefused) {
  const HttpError e = RefusedWith(R"({"model": "m", "prompt": "x", "max_tokens": 1, "max_tokens": 100000})");
  EXPECT_NE(e.message.find("duplicate key \"max_tokens\""), std::string::npos) << e.message;
  RefusedWith(R"({"model": "m", "prompt": "x", "stream_options": {"include_usage": true, "include_usage": false}})");
}

TEST(BodyLimits, RangeErrorsNameTheFieldAndShowTheValueSent) {
  HttpError e = RefusedWith(R"({"model": "m", "prompt": "x", "top_p": 1e-50})");
  EXPECT_NE(e.message.find("'top_p' 1e-50: "), std::string::npos) << e.message;
  e = RefusedWith(R"({"model": "m", "prompt": "x", "repetition_penalty": -2})");
  EXPECT_NE(e.message.find("'repetition_penalty' -2: "), std::string::npos) << e.message;
  e = RefusedWith(R"({"model": "m", "prompt": "x", "seed": 9223372036854775808})");  // 2^63
  EXPECT_NE(e.message.find("'seed' is too large"), std::string::npos) << e.message;
  e = RefusedWith(R"({"model": "m", "prompt": "x", "seed": 36893488147419103232})");  // 2^65
  EXPECT_NE(e.message.find("'seed' is too large"), std::string::npos) << e.message;
}

}  // namespace
}  // namespace k3::server
