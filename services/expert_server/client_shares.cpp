#include "services/expert_server/client_shares.h"

#include <algorithm>

namespace k3::svc {

uint64_t ClientShareBytes(uint64_t pool_bytes, uint64_t widest_read, size_t busy_clients) {
  const uint64_t ways = std::max<uint64_t>(2, busy_clients);
  return std::max(widest_read, pool_bytes / ways);
}

bool MayStartRead(uint64_t held, uint64_t bytes, uint64_t share) { return held == 0 || held + bytes <= share; }

bool RepliesOverdue(int replies_out, std::chrono::steady_clock::time_point last_progress,
                    std::chrono::steady_clock::time_point now, std::chrono::steady_clock::duration timeout) {
  return replies_out > 0 && now - last_progress > timeout;
}

}  // namespace k3::svc
