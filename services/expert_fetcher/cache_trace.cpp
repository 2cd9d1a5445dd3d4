#include "services/expert_fetcher/cache_trace.h"

#include <bit>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/error.h"
#include "common/user_file.h"

namespace k3::svc {

static_assert(std::endian::native == std::endian::little, "expert_trace.bin is written in host order");

void CacheTrace::Record(int layer, int expert, bool hit) {
  (hit ? hits_ : misses_) += 1;
  ++counts_[{layer, expert}];
  trace_.push_back(layer);
  trace_.push_back(expert);
}

std::string CacheTrace::HistJson() const {
  // Built with a stream: GCC 12 reports a false -Wrestrict on chained string operator+.
  std::ostringstream o;
  o << "{\"n_layers\":" << n_layers_ << ",\"n_experts\":" << n_experts_ << ",\"counts\":{";
  bool first = true;
  for (const auto& [k, n] : counts_) {
    o << (first ? "" : ",") << '"' << k.first << ',' << k.second << "\":" << n;
    first = false;
  }
  o << "}}\n";
  return o.str();
}

void CacheTrace::Write(const std::string& dir) const {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw Error(kExitOutput, dir + ": cannot create directory: " + ec.message());
  const std::string hist = dir + "/expert_hist.json";
  const std::string bin = dir + "/expert_trace.bin";
  WriteFileAtomically(hist, HistJson(), "", kExitOutput);
  WriteFileAtomically(bin, {reinterpret_cast<const char*>(trace_.data()), trace_.size() * sizeof(int32_t)}, "",
                      kExitOutput);
}

}  // namespace k3::svc
