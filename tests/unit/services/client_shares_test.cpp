// The expert server's pool shares and reply deadline (services/expert_server/client_shares.h).
#include "services/expert_server/client_shares.h"

#include <gtest/gtest.h>

namespace k3::svc {
namespace {

constexpr uint64_t kMiB = 1 << 20;
constexpr uint64_t kExpert = 17'530'880;  // one release expert read, widened to 4 KiB

TEST(ClientShares, OneClientGetsHalfThePoolSoANewcomerFindsRoom) {
  EXPECT_EQ(ClientShareBytes(256 * kMiB, kExpert, 0), 128 * kMiB);
  EXPECT_EQ(ClientShareBytes(256 * kMiB, kExpert, 1), 128 * kMiB);
  EXPECT_EQ(ClientShareBytes(256 * kMiB, kExpert, 2), 128 * kMiB);
}

TEST(ClientShares, SharesShrinkWithBusyClientsButHoldOneRead) {
  EXPECT_EQ(ClientShareBytes(256 * kMiB, kExpert, 4), 64 * kMiB);
  EXPECT_EQ(ClientShareBytes(256 * kMiB, kExpert, 64), kExpert);  // 4 MiB each would hold no read
  EXPECT_EQ(ClientShareBytes(kExpert, kExpert, 1), kExpert);      // a pool of one read still serves
}

TEST(ClientShares, AReadStartsWithinTheShareOrWhenNothingIsHeld) {
  EXPECT_TRUE(MayStartRead(0, kExpert, kExpert / 2));  // the first read always may
  EXPECT_TRUE(MayStartRead(3 * kExpert, kExpert, 4 * kExpert));
  EXPECT_FALSE(MayStartRead(3 * kExpert + 1, kExpert, 4 * kExpert));
}

TEST(ClientShares, RepliesAreOverdueOnlyWhenOutAndStuckPastTheTimeout) {
  using std::chrono::seconds;
  const auto t0 = std::chrono::steady_clock::time_point{} + seconds(100);
  EXPECT_FALSE(RepliesOverdue(0, t0, t0 + seconds(3600), seconds(30)));  // nothing out: idle, not stuck
  EXPECT_FALSE(RepliesOverdue(5, t0, t0 + seconds(30), seconds(30)));    // at the deadline: not yet
  EXPECT_TRUE(RepliesOverdue(1, t0, t0 + seconds(31), seconds(30)));
}

}  // namespace
}  // namespace k3::svc
