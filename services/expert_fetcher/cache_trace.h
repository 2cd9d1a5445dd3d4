// Per-(layer, expert) request counters and the demand request trace, written by
// --dump-cache-trace DIR as docs/formats.md ("Expert cache trace") describes:
//   expert_hist.json  {"n_layers":N,"n_experts":E,"counts":{"L,e":count,...}} (nonzero only)
//   expert_trace.bin  little-endian int32 (layer, expert) pairs in request order, no header
// Hits and misses are counted separately for the stats line.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace k3::svc {

class CacheTrace {
 public:
  CacheTrace(int n_layers, int n_experts) : n_layers_(n_layers), n_experts_(n_experts) {}
  void Record(int layer, int expert, bool hit);
  uint64_t hits() const { return hits_; }
  uint64_t misses() const { return misses_; }
  uint64_t requests() const { return hits_ + misses_; }
  const std::vector<int32_t>& trace() const { return trace_; }  // flattened pairs
  // Writes both files into `dir` (created if missing); k3::Error(kExitOutput) on failure.
  void Write(const std::string& dir) const;
  std::string HistJson() const;

 private:
  int n_layers_, n_experts_;
  uint64_t hits_ = 0, misses_ = 0;
  std::map<std::pair<int, int>, uint64_t> counts_;
  std::vector<int32_t> trace_;
};

}  // namespace k3::svc
