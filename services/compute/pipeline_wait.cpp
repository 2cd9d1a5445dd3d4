#include "pipeline_sources.h"

#include <algorithm>

#include "sources.h"

namespace k3::compute {

ipc::Clock::time_point WaitSlice(const std::function<bool()>& stop, ipc::Clock::time_point deadline) {
  if (stop && stop()) throw StopAtSafePoint{};
  return std::min(deadline, ipc::Clock::now() + std::chrono::milliseconds(50));
}

double SecondsSince(ipc::Clock::time_point t0) {
  return std::chrono::duration<double>(ipc::Clock::now() - t0).count();
}

}  // namespace k3::compute
