// launcher/serve_address: the URL of a serve run carries the port k3-server bound.
#include "launcher/serve_address.h"

#include <gtest/gtest.h>

namespace k3::launch {
namespace {

TEST(ServeAddress, TheBoundPortReplacesZero) {
  EXPECT_EQ(ServeUrl("127.0.0.1:0", 45678), "http://127.0.0.1:45678");
  EXPECT_EQ(ServeUrl("localhost:8080", 8080), "http://localhost:8080");
  EXPECT_EQ(ServeUrl("[::1]:0", 40001), "http://[::1]:40001");
  EXPECT_EQ(ServeUrl("::1:0", 40001), "http://[::1]:40001");
  EXPECT_EQ(ServeUrl("127.0.0.1:8080", 0), "http://127.0.0.1:8080");  // not reported: as asked
}

TEST(ServeAddress, TheOutFileNamesUrlHostPortModelAndPid) {
  const nlohmann::json r = ServeReport("[::1]:0", 40001, "k3-demo-tiny", 1234);
  EXPECT_EQ(r, nlohmann::json::parse(R"({"url": "http://[::1]:40001", "host": "::1", "port": 40001,
                                         "model": "k3-demo-tiny", "pid": 1234})"));
}

}  // namespace
}  // namespace k3::launch
