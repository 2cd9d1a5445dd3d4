// Which prefix-cache partition a request's snapshots belong to (docs/server.md "Prefix cache and
// privacy"). Compute's prefix cache is shared by every request of the server; a request that
// names a `cache_salt` (vLLM's field) is only matched with earlier requests of the same salt,
// so a client cannot learn from `cached_tokens`, or from its time to first token, whether someone
// else's prompt began like its own.
#pragma once
#include <cstdint>
#include <string>

namespace k3::server {

// 0 (the shared partition) for no salt; else XXH3-64 of the salt's bytes, never 0.
uint64_t CachePartition(const std::string& cache_salt);

}  // namespace k3::server
