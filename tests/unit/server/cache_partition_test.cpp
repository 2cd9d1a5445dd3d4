// The prefix-cache partition of a request (services/server/cache_partition.h) and the request's
// cache_salt field (openai_request.h).
#include "services/server/cache_partition.h"

#include <gtest/gtest.h>
#include <xxhash.h>

#include <string>
#include <variant>
#include <vector>

#include "services/server/openai_request.h"

namespace k3::server {
namespace {

TEST(CachePartition, NoSaltIsTheSharedPartitionAndSaltsAreApart) {
  EXPECT_EQ(CachePartition(""), 0u);
  EXPECT_NE(CachePartition("alice"), 0u);
  EXPECT_NE(CachePartition("alice"), CachePartition("bob"));
  EXPECT_EQ(CachePartition("alice"), CachePartition(std::string("alice")));  // a function of the bytes only
  EXPECT_EQ(CachePartition("alice"), XXH3_64bits("alice", 5));
}

TEST(CachePartition, TheRequestFieldIsANonEmptyBoundedString) {
  RequestDefaults d;
  auto parse = [&](const std::string& salt_json) {
    return ParseRequest(R"({"model":"m","prompt":"hi","cache_salt":)" + salt_json + "}", Endpoint::kCompletions, d);
  };
  const auto ok = parse(R"("tenant-7")");
  ASSERT_TRUE(std::holds_alternative<RequestSpec>(ok));
  EXPECT_EQ(std::get<RequestSpec>(ok).cache_salt, "tenant-7");
  for (const std::string& bad : std::vector<std::string>{R"("")", "7", "[\"a\"]", "\"" + std::string(257, 'x') + "\""}) {
    const auto r = parse(bad);
    ASSERT_TRUE(std::holds_alternative<HttpError>(r)) << bad;
    EXPECT_EQ(std::get<HttpError>(r).status, 400);
    EXPECT_NE(std::get<HttpError>(r).message.find("'cache_salt'"), std::string::npos);
  }
  const auto none = ParseRequest(R"({"model":"m","prompt":"hi"})", Endpoint::kCompletions, d);
  EXPECT_EQ(std::get<RequestSpec>(none).cache_salt, "");
}

}  // namespace
}  // namespace k3::server
