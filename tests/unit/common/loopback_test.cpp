// common/loopback: a host is loopback by the addresses it stands for, not by how it is spelled.
#include "common/loopback.h"

#include <gtest/gtest.h>

namespace k3 {
namespace {

TEST(Loopback, NumericAddresses) {
  for (const char* yes : {"127.0.0.1", "127.255.255.254", "127.1.2.3", "::1", "::ffff:127.0.0.1"})
    EXPECT_TRUE(IsLoopbackAddress(yes)) << yes;
  for (const char* no : {"128.0.0.1", "10.77.0.1", "0.0.0.0", "::", "::ffff:10.0.0.1", "126.255.255.255",
                         "127.0.0.1.attacker.example", "localhost", "", "127.0.0.1 "})
    EXPECT_FALSE(IsLoopbackAddress(no)) << no;
}

TEST(Loopback, HostsByWhatTheyResolveTo) {
  EXPECT_TRUE(IsLoopbackHost("127.0.0.1"));
  EXPECT_TRUE(IsLoopbackHost("[::1]"));
  EXPECT_TRUE(IsLoopbackHost("localhost"));  // /etc/hosts: 127.0.0.1 and ::1
  EXPECT_TRUE(IsLoopbackHost("lo"));         // ZeroMQ's interface name
  // A name with a loopback-looking prefix is just a name: not loopback unless it resolves to
  // loopback (it does not resolve here; the old string-prefix rule took it).
  EXPECT_FALSE(IsLoopbackHost("127.0.0.1.attacker.example"));
  EXPECT_FALSE(IsLoopbackHost("0.0.0.0"));
  EXPECT_FALSE(IsLoopbackHost("10.77.0.1"));
  EXPECT_FALSE(IsLoopbackHost(""));
  EXPECT_EQ(ResolveHost("127.0.0.9"), std::vector<std::string>{"127.0.0.9"});
  EXPECT_TRUE(LocalOnlyEndpoint("tcp://127.0.0.1:5555"));
  EXPECT_FALSE(LocalOnlyEndpoint("tcp://127.0.0.1.attacker.example:5555"));
  EXPECT_FALSE(LocalOnlyEndpoint("tcp://0.0.0.0:5555"));
}

}  // namespace
}  // namespace k3
