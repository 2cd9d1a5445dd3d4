#include "services/server/cache_partition.h"

#include <xxhash.h>

namespace k3::server {

uint64_t CachePartition(const std::string& cache_salt) {
  if (cache_salt.empty()) return 0;
  const uint64_t h = XXH3_64bits(cache_salt.data(), cache_salt.size());
  return h == 0 ? 1 : h;  // 0 is the shared partition
}

}  // namespace k3::server
