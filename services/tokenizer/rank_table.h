// Byte string -> rank lookup for BPE, the hot structure of the encoder: open addressing over
// one arena, because std::unordered_map<std::string, ...> costs a heap node and a pointer
// chase per probe. Each 16-byte slot holds the token's first 8 bytes, its length and its
// rank, so a lookup of a token of up to 8 bytes (most BPE pair probes) touches one cache
// line of the table and nothing else.
#pragma once
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace k3::tok {

inline constexpr uint32_t kNoRank = 0xFFFFFFFFu;
// Ranks must be below this (the slot packs the rank with a length byte).
inline constexpr uint32_t kRankLimit = 1u << 24;

// Hash of a short byte string (tokens, pieces): 8-byte words mixed with a multiply-xorshift;
// enough spread for linear probing at load factor <= 0.5.
inline uint64_t HashBytes(const char* p, size_t n) {
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

class RankTable {
 public:
  // Appends token `bytes` with `rank` (< kRankLimit).
  void Add(std::string_view bytes, uint32_t rank);
  // Call once after all Add()s: builds the hash slots. If two entries have the same bytes,
  // returns false and sets *dup_first / *dup_second to their ranks (in Add order).
  bool Finish(uint32_t* dup_first, uint32_t* dup_second);

  uint32_t Find(const char* p, size_t n) const {
    if (n == 0) return kNoRank;
    const uint64_t head = Head(p, n);
    return Find(head, Hash(head, p, n), p, n);
  }
  uint32_t Find(std::string_view s) const { return Find(s.data(), s.size()); }
  // The same with Head() and Hash() already computed (n >= 1).
  uint32_t Find(uint64_t head, uint64_t hash, const char* p, size_t n) const {
    if (!slots_) return kNoRank;
    if (!MayHold(hash)) return kNoRank;
    const uint32_t len_byte = n < 255 ? static_cast<uint32_t>(n) : 255;
    for (size_t i = hash & mask_;; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.rank_len == kEmpty) return kNoRank;
      if (s.head == head && (s.rank_len >> 24) == len_byte) {
        if (n <= 8) return s.rank_len & (kRankLimit - 1);
        if (Rest(s, p, n)) return s.rank_len & (kRankLimit - 1);
      }
    }
  }
  size_t size() const { return entries_.size(); }
  // Starts loading the slot a lookup with this hash reads first (the table is megabytes, so a
  // lookup is usually a cache miss; the encoder overlaps several).
  void Prefetch(uint64_t hash) const {
    if (slots_) __builtin_prefetch(&slots_[hash & mask_]);
  }
  // Rank of the single byte b (kNoRank if it is not a token).
  uint32_t ByteRank(uint8_t b) const { return byte_rank_[b]; }

  // The first min(n, 8) bytes, zero-padded, with fixed-size loads only (n >= 1).
  static uint64_t Head(const char* p, size_t n) {
    if (n >= 8) {
      uint64_t w;
      std::memcpy(&w, p, 8);
      return w;
    }
    if (n >= 4) {  // two overlapping 4-byte loads; the overlap holds the same bytes
      uint32_t lo, hi;
      std::memcpy(&lo, p, 4);
      std::memcpy(&hi, p + n - 4, 4);
      return uint64_t{lo} | (uint64_t{hi} << (8 * (n - 4)));
    }
    if (n >= 2) {
      uint16_t lo, hi;
      std::memcpy(&lo, p, 2);
      std::memcpy(&hi, p + n - 2, 2);
      return uint64_t{lo} | (uint64_t{hi} << (8 * (n - 2)));
    }
    return static_cast<uint8_t>(p[0]);
  }
  // Tokens of up to 8 bytes hash from the head alone (one multiply); longer ones use all bytes.
  static uint64_t Hash(uint64_t head, const char* p, size_t n) {
    if (n > 8) return HashBytes(p, n);
    uint64_t h = (head ^ (n * 0xFF51AFD7ED558CCDull)) * 0xC4CEB9FE1A85EC53ull;
    return h ^ (h >> 29);
  }

 private:
  struct Entry {
    uint32_t off, len, rank;
  };
  struct Slot {
    uint64_t head;      // the first min(len, 8) bytes, zero-padded
    uint32_t off;       // of the bytes in arena_
    uint32_t rank_len;  // min(len, 255) << 24 | rank; kEmpty for a free slot
  };
  static constexpr uint32_t kEmpty = 0;  // length 0: no token is empty

  // Bytes after the head (and the exact length for tokens of 255 bytes or more).
  bool Rest(const Slot& s, const char* p, size_t n) const {
    if ((s.rank_len >> 24) == 255 && long_len_.at(s.off) != n) return false;
    return std::memcmp(arena_.data() + s.off + 8, p + 8, n - 8) == 0;
  }

  // A blocked Bloom filter of the tokens' hashes (two bits in one 64-bit word, ~20 bits per
  // token: 512 KiB for 200k tokens, small enough to stay in a core's L2). BPE asks mostly for
  // pairs that are not tokens; the filter answers most of those without touching the
  // megabytes of slots (~1-2 % false positives go on to the table).
  static uint64_t FilterBits(uint64_t hash) {
    return (uint64_t{1} << ((hash >> 52) & 63)) | (uint64_t{1} << ((hash >> 58) & 63));
  }
  bool MayHold(uint64_t hash) const {
    const uint64_t bits = FilterBits(hash);
    return (filter_[(hash >> 32) & filter_mask_] & bits) == bits;
  }
  std::vector<uint64_t> filter_;
  size_t filter_mask_ = 0;

  struct FreeSlots {
    void operator()(Slot* p) const { std::free(p); }
  };

  std::string arena_;
  std::vector<Entry> entries_;
  // The slots, on 2 MiB huge pages where the kernel grants them (MADV_HUGEPAGE): lookups hit
  // random slots of megabytes, and with 4 KiB pages nearly each one also missed the TLB.
  std::unique_ptr<Slot[], FreeSlots> slots_;
  std::vector<uint32_t> long_len_;  // indexed by arena offset; only sized if a token is that long
  uint32_t byte_rank_[256] = {};     // set by Finish
  size_t mask_ = 0;
};

// A small direct-mapped memo in front of a RankTable for lookups of up to 8 bytes, hits and
// misses alike. BPE probes the same short pairs over and over (the bytes of one character,
// common letter pairs); the memo (64 KiB) stays in the core's cache where the table (8 MiB
// for 200k tokens) does not. One per Encode call: not thread-safe, allocated on first use.
class CachedRanks {
 public:
  explicit CachedRanks(const RankTable& table) : table_(table) {}

  uint32_t Find(const char* p, size_t n) {
    if (n > 8 || n == 0) return table_.Find(p, n);
    const uint64_t head = RankTable::Head(p, n);
    const uint64_t h = RankTable::Hash(head, p, n);
    if (!memo_) memo_.reset(new Memo[kMemo]());
    Memo& m = memo_[(h >> 40) & (kMemo - 1)];
    if (m.head == head && m.len == n) return m.rank;
    const uint32_t r = table_.Find(head, h, p, n);
    m = Memo{head, static_cast<uint32_t>(n), r};
    return r;
  }
  uint32_t Find(std::string_view s) { return Find(s.data(), s.size()); }
  uint32_t ByteRank(uint8_t b) const { return table_.ByteRank(b); }

 private:
  struct Memo {
    uint64_t head = 0;
    uint32_t len = 0;  // 0 = empty
    uint32_t rank = kNoRank;
  };
  static constexpr size_t kMemo = 4096;

  const RankTable& table_;
  std::unique_ptr<Memo[]> memo_;
};

}  // namespace k3::tok
