#include "tokenizer.h"

#include <algorithm>
#include <cstring>

#include "common/error.h"
#include "bpe.h"
#include "utf8.h"

namespace k3::tok {

Tokenizer Tokenizer::Load(const std::string& dir) { return Tokenizer(Vocab::Load(dir)); }

Tokenizer::Tokenizer(Vocab vocab)
    : vocab_(std::move(vocab)), pattern_(std::make_shared<SplitPattern>()) {
  const auto& added = vocab_.added();
  for (uint32_t i = 0; i < added.size(); ++i) {
    specials_by_length_.push_back(i);
    special_first_byte_[static_cast<uint8_t>(added[i].content[0])] = 1;
  }
  std::stable_sort(specials_by_length_.begin(), specials_by_length_.end(),
                   [&](uint32_t a, uint32_t b) { return added[a].content.size() > added[b].content.size(); });
}

// Ids of the pieces of one Encode call that took merges: natural text and code repeat their
// words, and a lookup here is one hash probe in a small table instead of a merge loop with a
// probe of the large rank table per pair. Scoped to one call (no state in the Tokenizer, so
// Encode stays thread-safe, and a benchmark that encodes the same text twice gains nothing).
class PieceCache {
 public:
  explicit PieceCache(const RankTable& ranks) : ranks_(ranks) {}
  // The memo of short rank lookups, for the merges of pieces not found here.
  CachedRanks& ranks() { return ranks_; }

  // Pieces longer than this are rare (whitespace or digit runs) and not worth keeping.
  static constexpr size_t kMaxPiece = 64;

  // Appends the cached ids of `piece` and returns true, or returns false.
  bool Find(std::string_view piece, uint64_t h, std::vector<uint32_t>* out) const {
    if (slots_.empty()) return false;
    for (size_t i = h & mask_;; i = (i + 1) & mask_) {
      const Slot& sl = slots_[i];
      if (sl.key_len == 0) return false;
      if (sl.hash == h && sl.key_len == piece.size() &&
          std::memcmp(keys_.data() + sl.key_off, piece.data(), piece.size()) == 0) {
        out->insert(out->end(), ids_.begin() + sl.ids_off, ids_.begin() + sl.ids_off + sl.ids_len);
        return true;
      }
    }
  }

  void Put(std::string_view piece, uint64_t h, const uint32_t* ids, size_t n) {
    if (2 * (used_ + 1) > slots_.size()) {
      if (slots_.size() >= kMaxSlots) Clear();  // bounded memory: start over
      else Grow();
    }
    Insert(Slot{h, static_cast<uint32_t>(keys_.size()), static_cast<uint32_t>(piece.size()),
                static_cast<uint32_t>(ids_.size()), static_cast<uint32_t>(n)});
    keys_.append(piece);
    ids_.insert(ids_.end(), ids, ids + n);
  }

 private:
  struct Slot {
    uint64_t hash;
    uint32_t key_off, key_len;  // key_len 0 = empty
    uint32_t ids_off, ids_len;
  };
  static constexpr size_t kMinSlots = 1024;
  static constexpr size_t kMaxSlots = 1 << 16;

  void Insert(const Slot& s) {
    size_t i = s.hash & mask_;
    while (slots_[i].key_len != 0) i = (i + 1) & mask_;
    slots_[i] = s;
    ++used_;
  }
  void Grow() {
    std::vector<Slot> old = std::move(slots_);
    slots_.assign(old.empty() ? kMinSlots : old.size() * 2, Slot{});
    mask_ = slots_.size() - 1;
    used_ = 0;
    for (const Slot& s : old)
      if (s.key_len) Insert(s);
  }
  void Clear() {
    std::fill(slots_.begin(), slots_.end(), Slot{});
    keys_.clear();
    ids_.clear();
    used_ = 0;
  }

  CachedRanks ranks_;
  std::vector<Slot> slots_;
  size_t mask_ = 0;
  size_t used_ = 0;
  std::string keys_;
  std::vector<uint32_t> ids_;
};

void Tokenizer::EncodeOrdinary(std::string_view text, std::vector<uint32_t>* out) const {
  Splitter splitter(*pattern_);
  PieceCache cache(vocab_.ranks());
  EncodeOrdinary(text, out, splitter, cache);
}

void Tokenizer::EncodeOrdinary(std::string_view text, std::vector<uint32_t>* out, Splitter& splitter,
                               PieceCache& cache) const {
  const RankTable& ranks = vocab_.ranks();
  CachedRanks& memo = cache.ranks();
  // Pieces go in batches: split kBatch pieces and start loading the rank-table slot of each
  // (almost every lookup misses the CPU caches), then look them up; the loads overlap.
  constexpr size_t kBatch = 16;
  struct Pending {
    std::string_view piece;
    uint64_t head, hash;
  };
  Pending batch[kBatch];
  size_t pending = 0;
  auto encode_piece = [&](const Pending& pc) {
    const std::string_view piece = pc.piece;
    // A piece that is one token is that token (tiktoken's shortcut, required for parity).
    const uint32_t whole = ranks.Find(pc.head, pc.hash, piece.data(), piece.size());
    if (whole != kNoRank) {
      out->push_back(whole);
      return;
    }
    if (piece.size() > PieceCache::kMaxPiece) {
      BpeMerge(memo, piece, out);
      return;
    }
    const uint64_t h = HashBytes(piece.data(), piece.size());
    if (cache.Find(piece, h, out)) return;
    const size_t before = out->size();
    BpeMerge(memo, piece, out);
    cache.Put(piece, h, out->data() + before, out->size() - before);
  };
  auto flush = [&] {
    for (size_t k = 0; k < pending; ++k) encode_piece(batch[k]);
    pending = 0;
  };
  auto add_piece = [&](std::string_view piece) {
    const uint64_t head = RankTable::Head(piece.data(), piece.size());
    const uint64_t hash = RankTable::Hash(head, piece.data(), piece.size());
    ranks.Prefetch(hash);
    batch[pending++] = Pending{piece, head, hash};
    if (pending == kBatch) flush();
  };
  // The pattern is defined on characters, so ill-formed bytes cannot be inside a piece:
  // each becomes its own single-byte token and the well-formed runs between them are
  // split independently (documented in docs/tokenizer.md).
  size_t p = 0;
  while (p < text.size()) {
    const size_t valid = Utf8ValidPrefix(text.substr(p));
    if (valid > 0) {
      splitter.Split(text.substr(p, valid), add_piece);
      flush();  // ids stay in text order
      p += valid;
    }
    if (p < text.size()) {
      out->push_back(ranks.Find(text.data() + p, 1));
      ++p;
    }
  }
}

std::vector<uint32_t> Tokenizer::Encode(std::string_view text, bool allow_special) const {
  std::vector<uint32_t> out;
  out.reserve(text.size() / 3 + 4);
  Splitter splitter(*pattern_);
  PieceCache cache(vocab_.ranks());
  if (!allow_special || vocab_.added().empty()) {
    EncodeOrdinary(text, &out, splitter, cache);
    return out;
  }
  const auto& added = vocab_.added();
  // Longest added token starting at p, or nullptr.
  auto special_at = [&](size_t p) -> const AddedToken* {
    if (!special_first_byte_[static_cast<uint8_t>(text[p])]) return nullptr;
    for (uint32_t k : specials_by_length_)
      if (text.compare(p, added[k].content.size(), added[k].content) == 0) return &added[k];
    return nullptr;
  };
  size_t seg = 0;  // start of the pending ordinary text
  size_t p = 0;
  while (p < text.size()) {
    const AddedToken* t = special_at(p);
    if (!t) {
      ++p;
      continue;
    }
    EncodeOrdinary(text.substr(seg, p - seg), &out, splitter, cache);
    out.push_back(t->id);
    p += t->content.size();
    seg = p;
  }
  EncodeOrdinary(text.substr(seg), &out, splitter, cache);
  return out;
}

std::string Tokenizer::Decode(const std::vector<uint32_t>& ids) const {
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) {
    std::string_view b;
    if (!vocab_.IdBytes(ids[i], &b))
      throw BadInput("unknown token id " + std::to_string(ids[i]) + " at position " + std::to_string(i));
    out.append(b);
  }
  return out;
}

std::string StreamDecoder::Push(uint32_t id) {
  std::string_view b;
  if (!tok_.vocab().IdBytes(id, &b)) throw BadInput("unknown token id " + std::to_string(id));
  pending_.append(b);
  const size_t hold = Utf8IncompleteTail(pending_);
  std::string ready = pending_.substr(0, pending_.size() - hold);
  pending_.erase(0, pending_.size() - hold);
  return ready;
}

std::string StreamDecoder::Finish() {
  std::string rest;
  rest.swap(pending_);
  return rest;
}

}  // namespace k3::tok
