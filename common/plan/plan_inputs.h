// The plan's input checks (internal to common/plan): options in range, a model the plan can
// size, and no product of the plan's arithmetic beyond 2^62 bytes.
#pragma once
#include "common/plan/memory_plan.h"

namespace k3::plan {

// Throws k3::Error(kExitUsage) naming the option at fault.
void CheckPlanInputs(const PlanModel& m, const PlanOptions& o);

}  // namespace k3::plan
