#include "tokenizer.h"

#include <algorithm>

#include "../../common/error.h"
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

void Tokenizer::EncodeOrdinary(std::string_view text, std::vector<uint32_t>* out) const {
  Splitter splitter(*pattern_);
  const RankTable& ranks = vocab_.ranks();
  // The pattern is defined on characters, so ill-formed bytes cannot be inside a piece:
  // each becomes its own single-byte token and the well-formed runs between them are
  // split independently (documented in docs/tokenizer.md).
  size_t p = 0;
  while (p < text.size()) {
    const size_t valid = Utf8ValidPrefix(text.substr(p));
    if (valid > 0) {
      splitter.Split(text.substr(p, valid),
                     [&](std::string_view piece) { BpeEncode(ranks, piece, out); });
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
  if (!allow_special || vocab_.added().empty()) {
    EncodeOrdinary(text, &out);
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
    EncodeOrdinary(text.substr(seg, p - seg), &out);
    out.push_back(t->id);
    p += t->content.size();
    seg = p;
  }
  EncodeOrdinary(text.substr(seg), &out);
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
