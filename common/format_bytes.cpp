#include "common/format_bytes.h"

#include <cstdio>

namespace k3 {

std::string FormatBytes(int64_t bytes) {
  char buf[32];
  const double b = static_cast<double>(bytes);
  if (bytes >= (1ll << 30)) std::snprintf(buf, sizeof buf, "%.2f GiB", b / (1ll << 30));
  else if (bytes >= (1ll << 20)) std::snprintf(buf, sizeof buf, "%.1f MiB", b / (1ll << 20));
  else std::snprintf(buf, sizeof buf, "%lld B", static_cast<long long>(bytes));
  return buf;
}

}  // namespace k3
