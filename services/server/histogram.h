// A Prometheus histogram (cumulative buckets, _sum, _count) for k3-server's latencies in
// /metrics. One bucket list serves every latency of the server: the demo model answers in
// milliseconds, the real model streaming its weights takes minutes per token and hours for a
// long prompt, so the bounds run from 5 ms to 2 h.
//
// Not thread-safe: Metrics holds it under its lock.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace k3::server {

// Upper bounds (seconds) of every k3-server histogram, ascending; +Inf is added.
const std::vector<double>& LatencyBuckets();

class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds = LatencyBuckets());
  void Observe(double v);
  uint64_t count() const { return count_; }
  double sum() const { return sum_; }
  // "# HELP name help\n# TYPE name histogram\nname_bucket{le="0.005"} 0\n...name_sum S\nname_count N\n".
  std::string Exposition(const std::string& name, const std::string& help) const;

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // per bound, not cumulative
  uint64_t count_ = 0;
  double sum_ = 0;
};

}  // namespace k3::server
