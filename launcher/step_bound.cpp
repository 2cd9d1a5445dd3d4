#include "step_bound.h"

namespace k3::launch {

const char* StepBound(const StepTimes& t) {
  if (t.step <= 0 || t.wait < kWaitShareBound * t.step) return "compute";
  return t.decode > t.read ? "decode" : "disk";
}

}  // namespace k3::launch
