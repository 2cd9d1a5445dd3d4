// Median of a sample (0 for none): the per-step decode times that k3-compute and k3-launch
// report use the same definition (the mean of the middle two for an even count).
#pragma once
#include <algorithm>
#include <vector>

namespace k3 {

inline double Median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace k3
