// services/server/histogram: Prometheus histogram text (cumulative buckets, le inclusive,
// +Inf, _sum, _count) for observations counted by hand.
#include "services/server/histogram.h"

#include <gtest/gtest.h>

namespace k3::server {
namespace {

TEST(Histogram, CumulativeBucketsWithInclusiveUpperBounds) {
  Histogram h({0.1, 1, 10});
  for (double v : {0.05, 0.1, 0.5, 1.0, 3.0, 20.0}) h.Observe(v);
  EXPECT_EQ(h.Exposition("k3_x_seconds", "X."),
            "# HELP k3_x_seconds X.\n"
            "# TYPE k3_x_seconds histogram\n"
            "k3_x_seconds_bucket{le=\"0.1\"} 2\n"   // 0.05, 0.1 (a bound is inside its bucket)
            "k3_x_seconds_bucket{le=\"1\"} 4\n"     // + 0.5, 1.0
            "k3_x_seconds_bucket{le=\"10\"} 5\n"    // + 3.0
            "k3_x_seconds_bucket{le=\"+Inf\"} 6\n"  // + 20.0
            "k3_x_seconds_sum 24.649999999999999\n"
            "k3_x_seconds_count 6\n");
  EXPECT_EQ(h.count(), 6u);
  EXPECT_DOUBLE_EQ(h.sum(), 24.65);
}

TEST(Histogram, EmptyHasZeroBucketsAndTheDefaultBoundsSpanMillisecondsToHours) {
  Histogram h;
  const std::string text = h.Exposition("k3_y", "Y.");
  EXPECT_NE(text.find("k3_y_bucket{le=\"0.005\"} 0\n"), std::string::npos) << text;
  EXPECT_NE(text.find("k3_y_bucket{le=\"7200\"} 0\n"), std::string::npos) << text;
  EXPECT_NE(text.find("k3_y_bucket{le=\"+Inf\"} 0\nk3_y_sum 0\nk3_y_count 0\n"), std::string::npos) << text;
  const std::vector<double>& b = LatencyBuckets();
  for (size_t i = 1; i < b.size(); ++i) EXPECT_LT(b[i - 1], b[i]);
}

}  // namespace
}  // namespace k3::server
