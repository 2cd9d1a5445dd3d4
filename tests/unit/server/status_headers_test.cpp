// services/server/status_headers: 405 with Allow for a path asked with the wrong method, and
// Retry-After's estimate for a 429.
#include "services/server/status_headers.h"

#include <gtest/gtest.h>

namespace k3::server {
namespace {

std::string Header(const HttpError& e, const std::string& name) {
  for (const auto& [n, v] : e.headers)
    if (n == name) return v;
  return "(none)";
}

TEST(StatusHeaders, AKnownPathWithAnotherMethodIs405WithAllow) {
  for (const char* m : {"GET", "HEAD", "PUT", "DELETE", "OPTIONS"}) {
    const std::optional<HttpError> e = MethodNotAllowed(m, "/v1/chat/completions");
    ASSERT_TRUE(e) << m;
    EXPECT_EQ(e->status, 405);
    EXPECT_EQ(e->code, "method_not_allowed");
    EXPECT_EQ(Header(*e, "Allow"), "POST");
  }
  for (const char* p : {"/v1/models", "/v1/models/k3-demo-tiny", "/health", "/metrics"}) {
    const std::optional<HttpError> e = MethodNotAllowed("POST", p);
    ASSERT_TRUE(e) << p;
    EXPECT_EQ(Header(*e, "Allow"), "GET, HEAD");
    EXPECT_FALSE(MethodNotAllowed("GET", p)) << p;
    EXPECT_FALSE(MethodNotAllowed("HEAD", p)) << p;
  }
  EXPECT_FALSE(MethodNotAllowed("POST", "/v1/completions"));
  // Paths we do not have stay 404 (no route), whatever the method.
  for (const char* p : {"/v1/nothing", "/v1/models/", "/v1/completions/x", "/"})
    EXPECT_FALSE(MethodNotAllowed("GET", p)) << p;
}

TEST(StatusHeaders, RetryAfterIsAPlaceOpeningInTheBatch) {
  EXPECT_EQ(RetryAfterSeconds(0, 1), 1);      // nothing completed yet
  EXPECT_EQ(RetryAfterSeconds(0.2, 1), 1);    // at least a second
  EXPECT_EQ(RetryAfterSeconds(7.5, 1), 8);    // rounded up
  EXPECT_EQ(RetryAfterSeconds(7.5, 4), 2);    // four running: one ends about every 1.9 s
  EXPECT_EQ(RetryAfterSeconds(1e9, 1), 3600);  // at most an hour
  EXPECT_EQ(RetryAfterSeconds(-1, 0), 1);
  const HttpError e = WithRetryAfter({429, "busy", "rate_limit_error", "queue_full"}, 30, 2);
  EXPECT_EQ(e.status, 429);
  EXPECT_EQ(Header(e, "Retry-After"), "15");
}

}  // namespace
}  // namespace k3::server
