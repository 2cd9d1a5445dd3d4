#include "rank_table.h"

namespace k3::tok {

void RankTable::Add(std::string_view bytes, uint32_t rank) {
  entries_.push_back({static_cast<uint32_t>(arena_.size()), static_cast<uint32_t>(bytes.size()), rank});
  arena_.append(bytes);
}

bool RankTable::Finish(uint32_t* dup_first, uint32_t* dup_second) {
  size_t cap = 16;
  while (cap < entries_.size() * 2) cap <<= 1;
  slots_.assign(cap, kEmpty);
  mask_ = cap - 1;
  for (uint32_t e = 0; e < entries_.size(); ++e) {
    const Entry& en = entries_[e];
    const char* p = arena_.data() + en.off;
    const uint64_t h = Hash(p, en.len);
    size_t i = h & mask_;
    while (slots_[i] != kEmpty) {
      const Entry& other = entries_[static_cast<uint32_t>(slots_[i])];
      if (other.len == en.len && std::memcmp(arena_.data() + other.off, p, en.len) == 0) {
        *dup_first = other.rank;
        *dup_second = en.rank;
        return false;
      }
      i = (i + 1) & mask_;
    }
    slots_[i] = (h >> 32 << 32) | e;
  }
  return true;
}

}  // namespace k3::tok
