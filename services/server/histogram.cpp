#include "services/server/histogram.h"

#include <algorithm>
#include <cstdio>

namespace k3::server {
namespace {

std::string Num(const char* format, double v) {
  char b[40];
  std::snprintf(b, sizeof b, format, v);
  return b;
}

}  // namespace

const std::vector<double>& LatencyBuckets() {
  static const std::vector<double> b = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,  1,    2.5,  5,
                                        10,    30,   60,    120,  300, 600,  1800, 3600, 7200};
  return b;
}

Histogram::Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size(), 0) {}

void Histogram::Observe(double v) {
  // le: a value equal to a bound belongs to that bucket.
  const auto it = std::lower_bound(bounds_.begin(), bounds_.end(), v);
  if (it != bounds_.end()) ++counts_[static_cast<size_t>(it - bounds_.begin())];
  ++count_;
  sum_ += v;
}

std::string Histogram::Exposition(const std::string& name, const std::string& help) const {
  std::string out = "# HELP " + name + " " + help + "\n# TYPE " + name + " histogram\n";
  uint64_t cumulative = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cumulative += counts_[i];
    out += name + "_bucket{le=\"" + Num("%g", bounds_[i]) + "\"} " + std::to_string(cumulative) + "\n";
  }
  out += name + "_bucket{le=\"+Inf\"} " + std::to_string(count_) + "\n";
  out += name + "_sum " + Num("%.17g", sum_) + "\n";
  out += name + "_count " + std::to_string(count_) + "\n";
  return out;
}

}  // namespace k3::server
