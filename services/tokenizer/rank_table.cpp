#include "rank_table.h"

#include <sys/mman.h>

#include <algorithm>
#include <new>

namespace k3::tok {

void RankTable::Add(std::string_view bytes, uint32_t rank) {
  entries_.push_back({static_cast<uint32_t>(arena_.size()), static_cast<uint32_t>(bytes.size()), rank});
  arena_.append(bytes);
}

bool RankTable::Finish(uint32_t* dup_first, uint32_t* dup_second) {
  size_t cap = 16;
  while (cap < entries_.size() * 2) cap <<= 1;
  constexpr size_t kHuge = size_t{2} << 20;
  const size_t bytes = (cap * sizeof(Slot) + kHuge - 1) / kHuge * kHuge;
  Slot* mem = static_cast<Slot*>(std::aligned_alloc(kHuge, bytes));
  if (!mem) throw std::bad_alloc();
  madvise(mem, bytes, MADV_HUGEPAGE);  // a hint: without it the table still works
  slots_.reset(mem);
  std::fill(mem, mem + cap, Slot{0, 0, kEmpty});
  mask_ = cap - 1;
  size_t words = 64;
  while (words * 64 < entries_.size() * 20) words <<= 1;
  filter_.assign(words, 0);
  filter_mask_ = words - 1;
  for (uint32_t e = 0; e < entries_.size(); ++e) {
    const Entry& en = entries_[e];
    if (en.len == 0) continue;  // cannot be looked up; the vocabulary refuses empty tokens elsewhere
    if (en.len >= 255) {
      if (long_len_.size() < arena_.size()) long_len_.resize(arena_.size(), 0);
      long_len_[en.off] = en.len;
    }
    const char* p = arena_.data() + en.off;
    const uint64_t h = Hash(Head(p, en.len), p, en.len);
    filter_[(h >> 32) & filter_mask_] |= FilterBits(h);
    size_t i = h & mask_;
    while (slots_[i].rank_len != kEmpty) {
      const Slot& s = slots_[i];
      const uint32_t other_len = (s.rank_len >> 24) == 255 ? long_len_[s.off] : s.rank_len >> 24;
      if (other_len == en.len && std::memcmp(arena_.data() + s.off, p, en.len) == 0) {
        *dup_first = s.rank_len & (kRankLimit - 1);
        *dup_second = en.rank;
        return false;
      }
      i = (i + 1) & mask_;
    }
    const uint32_t len_byte = en.len < 255 ? en.len : 255;
    slots_[i] = Slot{Head(p, en.len), en.off, len_byte << 24 | (en.rank & (kRankLimit - 1))};
  }
  for (int b = 0; b < 256; ++b) {
    const char c = static_cast<char>(b);
    byte_rank_[b] = Find(&c, 1);
  }
  return true;
}

}  // namespace k3::tok
