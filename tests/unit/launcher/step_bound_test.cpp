// StepBound: the run summary's rule for what bound a generated token (launcher/step_bound.h).
#include "launcher/step_bound.h"

#include <gtest/gtest.h>

#include <string>

namespace k3::launch {
namespace {

std::string Bound(double step, double wait, double read, double decode) { return StepBound({step, wait, read, decode}); }

TEST(StepBound, ComputeWhenItRarelyWaited) {
  EXPECT_EQ(Bound(1.0, 0.05, 0.9, 0.0), "compute");  // the disk was busy, but compute did not wait on it
  EXPECT_EQ(Bound(1.0, 0.0999, 0.5, 0.8), "compute");
  EXPECT_EQ(Bound(0.0, 0.0, 0.0, 0.0), "compute");  // no step measured: nothing says the weights bound it
}

TEST(StepBound, DiskWhenReadsOutlastDecoding) {
  EXPECT_EQ(Bound(1.0, 0.1, 0.9, 0.0), "disk");  // the share's edge counts as waiting
  EXPECT_EQ(Bound(2.0, 1.5, 1.8, 0.6), "disk");
  EXPECT_EQ(Bound(2.0, 1.5, 1.0, 1.0), "disk");  // a tie goes to the disk
}

TEST(StepBound, DecodeWhenDecodingOutlastsReads) {
  EXPECT_EQ(Bound(2.0, 1.5, 0.9, 1.2), "decode");
}

}  // namespace
}  // namespace k3::launch
