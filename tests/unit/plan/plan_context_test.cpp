// --context: refused (exit 2) when it overflows the plan's arithmetic or exceeds what the
// model supports (max_position_embeddings), on the real release config.
#include <gtest/gtest.h>

#include "common/error.h"
#include "common/plan/memory_plan.h"
#include "launcher/model_layout.h"

namespace k3::plan {
namespace {

int CodeOf(const PlanModel& m, int64_t context) {
  PlanOptions o;
  o.context = context;
  try {
    (void)PlanFloor(m, o);
    (void)MakePlan(m, int64_t{1} << 40, o);
    return 0;
  } catch (const Error& e) {
    return e.code();
  }
}

TEST(PlanContext, ReleaseLimitAndOverflow) {
  const launch::ModelLayout l = launch::LoadModelLayout(K3_RELEASE_DATA_DIR, true);
  ASSERT_EQ(l.cfg.max_position_embeddings, 1048576);
  EXPECT_EQ(CodeOf(l.plan_model, 4096), 0);
  EXPECT_EQ(CodeOf(l.plan_model, 1048576), 0);
  EXPECT_EQ(CodeOf(l.plan_model, 1048577), kExitUsage);
  EXPECT_EQ(CodeOf(l.plan_model, 7205759403792794), kExitUsage);
  EXPECT_EQ(CodeOf(l.plan_model, INT64_MAX), kExitUsage);
}

TEST(PlanContext, WithoutAModelLimitOnlyOverflowIsRefused) {
  launch::ModelLayout l = launch::LoadModelLayout(K3_RELEASE_DATA_DIR, true);
  l.plan_model.cfg.max_position_embeddings = 0;
  // Huge but representable: the plan is computed (and needs a huge budget), no wrap-around.
  PlanOptions o;
  o.context = int64_t{1} << 30;
  const int64_t floor = PlanFloor(l.plan_model, o);
  EXPECT_GT(floor, int64_t{1} << 40);
  for (int64_t c : {int64_t{7205759403792794}, INT64_MAX / 2, INT64_MAX}) {
    o.context = c;
    try {
      (void)PlanFloor(l.plan_model, o);
      ADD_FAILURE() << "context " << c << " accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), kExitUsage);
      EXPECT_NE(std::string(e.what()).find("--context"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace k3::plan
