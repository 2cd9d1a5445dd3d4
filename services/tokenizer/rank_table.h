// Byte string -> rank lookup for BPE, the hot structure of the encoder: open addressing over
// one arena, because std::unordered_map<std::string, ...> costs a heap node and a pointer
// chase per probe.
#pragma once
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace k3::tok {

inline constexpr uint32_t kNoRank = 0xFFFFFFFFu;

class RankTable {
 public:
  // Appends token `bytes` with `rank`.
  void Add(std::string_view bytes, uint32_t rank);
  // Call once after all Add()s: builds the hash slots. If two entries have the same bytes,
  // returns false and sets *dup_first / *dup_second to their ranks (in Add order).
  bool Finish(uint32_t* dup_first, uint32_t* dup_second);

  uint32_t Find(const char* p, size_t n) const {
    if (slots_.empty()) return kNoRank;
    const uint64_t h = Hash(p, n);
    const uint32_t tag = static_cast<uint32_t>(h >> 32);
    size_t i = h & mask_;
    for (;;) {
      const uint64_t e = slots_[i];
      if (e == kEmpty) return kNoRank;
      // The tag (high hash bits) rejects almost every miss without touching the entry,
      // which is most lookups: BPE probes many pairs that are not tokens.
      if (static_cast<uint32_t>(e >> 32) == tag) {
        const Entry& en = entries_[static_cast<uint32_t>(e)];
        if (en.len == n && std::memcmp(arena_.data() + en.off, p, n) == 0) return en.rank;
      }
      i = (i + 1) & mask_;
    }
  }
  uint32_t Find(std::string_view s) const { return Find(s.data(), s.size()); }
  size_t size() const { return entries_.size(); }

 private:
  struct Entry {
    uint32_t off, len, rank;
  };
  static constexpr uint64_t kEmpty = ~uint64_t{0};  // slot = tag << 32 | entry index

  static uint64_t Hash(const char* p, size_t n) {
    // Tokens are short: mix 8-byte words with a multiply-xorshift; enough spread for
    // linear probing at load factor <= 0.5.
    uint64_t h = 0x9E3779B97F4A7C15ull ^ (n * 0xFF51AFD7ED558CCDull);
    while (n >= 8) {
      uint64_t w;
      std::memcpy(&w, p, 8);
      h = (h ^ w) * 0xC4CEB9FE1A85EC53ull;
      h ^= h >> 29;
      p += 8;
      n -= 8;
    }
    if (n > 0) {
      uint64_t w = 0;
      std::memcpy(&w, p, n);
      h = (h ^ w) * 0xC4CEB9FE1A85EC53ull;
    }
    h ^= h >> 32;
    return h;
  }

  std::string arena_;
  std::vector<Entry> entries_;
  std::vector<uint64_t> slots_;
  size_t mask_ = 0;
};

}  // namespace k3::tok
