// Per-layer activation dump (docs/test-contracts.md "Trace directory"). Each call appends raw
// little-endian rows to DIR/NAME, so chunked prefill produces the same [T][…] files as one pass.
#pragma once
#include <cstdint>
#include <set>
#include <string>

namespace k3::compute {

class Tracer {
 public:
  // Creates DIR (and parents); throws Error(kExitOutput) on failure.
  explicit Tracer(std::string dir);
  void Append(const std::string& name, const void* data, int64_t bytes);
  const std::string& dir() const { return dir_; }
  // Writes DIR/NAME with exactly `text`.
  void WriteText(const std::string& name, const std::string& text);

 private:
  std::string dir_;
  std::set<std::string> started_;  // names truncated by this tracer; later calls append
};

}  // namespace k3::compute
