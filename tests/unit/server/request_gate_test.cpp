// services/server/request_gate: what a request must show before a route runs (docs/server.md
// "Who may call"): the key, a JSON body for POST, and without a key a Host that names us.
#include "services/server/request_gate.h"

#include <gtest/gtest.h>

namespace k3::server {
namespace {

GateConfig KeyLess() { return {"", DefaultAllowedHosts("127.0.0.1", "127.0.0.1"), 8080}; }
GateRequest Post(std::string host = "127.0.0.1:8080", std::string type = "application/json") {
  return {"POST", "/v1/completions", "", std::move(type), std::move(host)};
}
int StatusOf(const GateRequest& r, const GateConfig& c) {
  const std::optional<HttpError> e = CheckRequest(r, c);
  return e ? e->status : 0;
}

TEST(RequestGate, PostBodiesMustBeJson) {
  EXPECT_EQ(StatusOf(Post(), KeyLess()), 0);
  EXPECT_EQ(StatusOf(Post("127.0.0.1:8080", "application/json; charset=utf-8"), KeyLess()), 0);
  EXPECT_EQ(StatusOf(Post("127.0.0.1:8080", "Application/JSON"), KeyLess()), 0);
  // What a web page can send without a preflight, and nothing at all.
  for (const char* t : {"text/plain", "text/plain;charset=UTF-8", "application/x-www-form-urlencoded",
                        "multipart/form-data; boundary=x", "", "application/jsonp", "application/json-patch+json"})
    EXPECT_EQ(StatusOf(Post("127.0.0.1:8080", t), KeyLess()), 415) << t;
  GateRequest get{"GET", "/v1/models", "", "", "127.0.0.1:8080"};
  EXPECT_EQ(StatusOf(get, KeyLess()), 0);  // a GET has no body to check
}

TEST(RequestGate, WithoutAKeyTheHostMustNameThisServer) {
  for (const char* h : {"127.0.0.1:8080", "127.0.0.1", "localhost:8080", "LOCALHOST", "[::1]:8080", "[::1]"})
    EXPECT_EQ(StatusOf(Post(h), KeyLess()), 0) << h;
  // DNS rebinding: a page at evil.example whose name now points at 127.0.0.1.
  for (const char* h : {"evil.example:8080", "evil.example", "127.0.0.1:8081", "", "127.0.0.1.evil.example:8080",
                        "localhost.:8080"})
    EXPECT_EQ(StatusOf(Post(h), KeyLess()), 403) << h;
  GateConfig named = KeyLess();
  named.allowed_hosts.push_back("k3.lan");
  EXPECT_EQ(StatusOf(Post("k3.lan:8080"), named), 0);
  GateConfig any = KeyLess();
  any.allowed_hosts = {"*"};
  EXPECT_EQ(StatusOf(Post("evil.example"), any), 0);
}

TEST(RequestGate, TheKeyWithAnyCaseOfBearer) {
  GateConfig c{"sekrit", {}, 8080};  // with a key the Host is not checked
  GateRequest r = Post("anything.example");
  EXPECT_EQ(StatusOf(r, c), 401);
  for (const char* a : {"Bearer sekrit", "bearer sekrit", "BEARER sekrit", "Bearer  sekrit "}) {
    r.authorization = a;
    EXPECT_EQ(StatusOf(r, c), 0) << a;
  }
  for (const char* a : {"Bearer sekri", "Bearer sekritt", "Basic sekrit", "sekrit", "Bearer", "Bearer SEKRIT"}) {
    r.authorization = a;
    EXPECT_EQ(StatusOf(r, c), 401) << a;
  }
  GateRequest health{"GET", "/health", "", "", "x"};
  EXPECT_EQ(StatusOf(health, c), 0);  // open, as documented
  r.authorization = "Bearer sekrit";
  r.content_type = "text/plain";
  EXPECT_EQ(StatusOf(r, c), 415);  // the key does not make a form body JSON
}

TEST(RequestGate, ABodyWithoutATypeIsJsonOnlyWhenAKeyIsAsked) {
  GateConfig keyed{"sekrit", {}, 8080};
  GateRequest r = Post("127.0.0.1:8080", "");
  r.authorization = "Bearer sekrit";
  EXPECT_EQ(StatusOf(r, keyed), 0);
  r.content_type = "  ";
  EXPECT_EQ(StatusOf(r, keyed), 0);
  r.authorization = "";
  EXPECT_EQ(StatusOf(r, keyed), 401);  // the key is still asked
  // Key-less: a page may send a type-less body (a Blob, an ArrayBuffer) without a preflight.
  const std::optional<HttpError> e = CheckRequest(Post("127.0.0.1:8080", ""), KeyLess());
  ASSERT_TRUE(e);
  EXPECT_EQ(e->status, 415);
  EXPECT_NE(e->message.find("only by a server with an API key"), std::string::npos) << e->message;
}

TEST(RequestGate, AKnownPathWithTheWrongMethodIs405BeforeTheBodyType) {
  GateRequest r{"POST", "/v1/models", "", "", "127.0.0.1:8080"};
  const std::optional<HttpError> e = CheckRequest(r, KeyLess());
  ASSERT_TRUE(e);
  EXPECT_EQ(e->status, 405);
  ASSERT_EQ(e->headers.size(), 1u);
  EXPECT_EQ(e->headers[0], (std::pair<std::string, std::string>{"Allow", "GET, HEAD"}));
  r.method = "GET";
  r.path = "/v1/completions";
  EXPECT_EQ(StatusOf(r, KeyLess()), 405);
  GateConfig keyed{"sekrit", {}, 8080};
  EXPECT_EQ(StatusOf(r, keyed), 401);  // who may call comes first
}

}  // namespace
}  // namespace k3::server
