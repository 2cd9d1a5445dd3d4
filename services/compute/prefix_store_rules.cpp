#include "prefix_store_rules.h"

#include <xxhash.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <memory>

namespace k3::compute::store {

uint64_t ModelKey(const state::ModelIdentity& model, bool expert_inputs_bf16) {
  const uint64_t parts[3] = {model.config_hash, model.layout_hash, expert_inputs_bf16 ? 1u : 0u};
  return XXH3_64bits(parts, sizeof parts);
}

uint64_t IdsHash(std::span<const int32_t> ids) { return XXH3_64bits(ids.data(), ids.size() * sizeof(int32_t)); }

std::string EntryName(const EntryKey& key) {
  char b[80];
  std::snprintf(b, sizeof b, "k3p-%016" PRIx64 "-%" PRId64 "-%016" PRIx64 ".k3state", key.model, key.length, key.ids);
  return b;
}

EntryKey KeyOf(uint64_t model, std::span<const int32_t> ids) {
  return {model, static_cast<int64_t>(ids.size()), IdsHash(ids)};
}

std::optional<EntryKey> ParseEntryName(const std::string& name) {
  EntryKey k;
  char tail = 0;
  int used = 0;
  if (std::sscanf(name.c_str(), "k3p-%16" SCNx64 "-%" SCNd64 "-%16" SCNx64 ".k3state%n%c", &k.model, &k.length,
                  &k.ids, &used, &tail) != 3)
    return std::nullopt;
  // Exactly the form EntryName writes (no other spelling of the same numbers, nothing after).
  if (k.length <= 0 || static_cast<size_t>(used) != name.size() || EntryName(k) != name) return std::nullopt;
  return k;
}

std::vector<EntryKey> Candidates(const std::vector<EntryKey>& entries, uint64_t model, std::span<const int32_t> ids,
                                 int64_t max_length) {
  const int64_t limit = std::min<int64_t>(max_length, static_cast<int64_t>(ids.size()) - 1);
  std::vector<EntryKey> out;
  for (const EntryKey& e : entries)
    if (e.model == model && e.length <= limit) out.push_back(e);
  // Ascending lengths: one streaming hash over ids, read at each length.
  std::sort(out.begin(), out.end(), [](const EntryKey& a, const EntryKey& b) { return a.length < b.length; });
  std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> h{XXH3_createState(), &XXH3_freeState};
  XXH3_64bits_reset(h.get());
  int64_t hashed = 0;
  uint64_t at_length = 0;
  std::vector<EntryKey> match;
  for (const EntryKey& e : out) {
    if (e.length != hashed) {
      XXH3_64bits_update(h.get(), ids.data() + hashed, static_cast<size_t>(e.length - hashed) * sizeof(int32_t));
      hashed = e.length;
      at_length = XXH3_64bits_digest(h.get());
    }
    if (e.ids == at_length) match.push_back(e);
  }
  std::reverse(match.begin(), match.end());  // longest first
  return match;
}

std::vector<std::string> ChooseEvictions(std::vector<EntryUse> entries, int64_t incoming, int64_t cap) {
  std::sort(entries.begin(), entries.end(), [](const EntryUse& a, const EntryUse& b) {
    return a.last_use_ns != b.last_use_ns ? a.last_use_ns < b.last_use_ns : a.name < b.name;
  });
  if (incoming > cap) return {};
  int64_t total = incoming;
  for (const EntryUse& e : entries) total += e.bytes;
  std::vector<std::string> out;
  for (const EntryUse& e : entries) {
    if (total <= cap) break;
    out.push_back(e.name);
    total -= e.bytes;
  }
  return out;
}

std::string TemporaryName(int64_t pid, const EntryKey& key) {
  return ".k3p-tmp-" + std::to_string(pid) + "-" + EntryName(key);
}

bool StaleTemporary(const std::string& name, int64_t age_ns) {
  constexpr int64_t kHour = int64_t{3600} * 1000000000;
  return name.rfind(".k3p-tmp-", 0) == 0 && age_ns > kHour;
}

std::vector<int64_t> SnapshotMarks(int64_t feed, int64_t chunk, int64_t interval, int64_t also, bool prompt_end) {
  std::vector<int64_t> m;
  if (interval > 0 && chunk > 0) {
    const int64_t step = (interval + chunk - 1) / chunk * chunk;
    for (int64_t at = step; at < feed; at += step) m.push_back(at);
  }
  if (also > 0 && also < feed) m.push_back(also);
  if (prompt_end && feed >= 2) m.push_back(feed - 1);
  std::sort(m.begin(), m.end());
  m.erase(std::unique(m.begin(), m.end()), m.end());
  return m;
}

}  // namespace k3::compute::store
