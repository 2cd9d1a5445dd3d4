// services/server/connection_gate: when a connection's bytes hold a whole request head
// (RFC 9112: the request line and header fields end with an empty line; a bare LF is
// tolerated as a line end, as httplib does).
#include "services/server/connection_gate.h"

#include <gtest/gtest.h>

namespace k3::server {
namespace {

TEST(ConnectionGate, AHeadIsCompleteAtItsEmptyLine) {
  EXPECT_FALSE(RequestHeadComplete(""));
  EXPECT_FALSE(RequestHeadComplete("POST /v1/completions HTTP/1.1\r\n"));
  EXPECT_FALSE(RequestHeadComplete("POST /v1/completions HTTP/1.1\r\nHost: a\r\nX-a: b"));  // slowloris
  EXPECT_FALSE(RequestHeadComplete("POST / HTTP/1.1\r\nHost: a\r\n"));
  EXPECT_TRUE(RequestHeadComplete("GET /health HTTP/1.1\r\nHost: a\r\n\r\n"));
  EXPECT_TRUE(RequestHeadComplete("POST / HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}"));  // with its body
  EXPECT_TRUE(RequestHeadComplete("GET / HTTP/1.0\n\n"));
}

}  // namespace
}  // namespace k3::server
