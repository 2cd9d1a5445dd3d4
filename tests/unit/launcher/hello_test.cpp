// Hello.pid: the launcher accepts a Hello only from the child it started under that name.
#include <gtest/gtest.h>

#include "launcher/run.h"

namespace k3::launch {
namespace {

TEST(Hello, PidMustBeTheChildStartedUnderThatName) {
  std::vector<Service> s(2);
  s[0].name = "trunk-reader";
  s[0].pid = 100;
  s[1].name = "compute";
  s[1].pid = 200;
  EXPECT_EQ(HelloMismatch(s, "trunk-reader", "trunk-reader", 100), "");
  EXPECT_EQ(HelloMismatch(s, "compute", "compute", 200), "");
  // An old instance of a restarted service, or another process claiming the name.
  EXPECT_NE(HelloMismatch(s, "trunk-reader", "trunk-reader", 101).find("pid 101"), std::string::npos);
  EXPECT_NE(HelloMismatch(s, "compute", "compute", 100), "");  // another service's pid
  EXPECT_NE(HelloMismatch(s, "compute", "trunk-reader", 100), "");  // wrong DEALER identity
  EXPECT_NE(HelloMismatch(s, "tokenizer", "tokenizer", 300).find("unknown"), std::string::npos);
  s[0].pid = -1;  // not running
  EXPECT_NE(HelloMismatch(s, "trunk-reader", "trunk-reader", 100).find("not running"), std::string::npos);
}

}  // namespace
}  // namespace k3::launch
