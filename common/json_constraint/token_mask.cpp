#include "token_mask.h"

#include <algorithm>
#include <numeric>

namespace k3::json_constraint {

TokenTrie::TokenTrie(std::vector<std::string> tokens) : tokens_(std::move(tokens)) {
  std::vector<int32_t> order;
  for (size_t id = 0; id < tokens_.size(); ++id)
    if (!tokens_[id].empty()) order.push_back(static_cast<int32_t>(id));
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return tokens_[static_cast<size_t>(a)] < tokens_[static_cast<size_t>(b)] || (tokens_[static_cast<size_t>(a)] == tokens_[static_cast<size_t>(b)] && a < b);
  });
  auto add = [&](uint8_t b) {
    byte_.push_back(b);
    first_child_.push_back(kNone);
    next_sibling_.push_back(kNone);
    subtree_end_.push_back(0);
    ids_begin_.push_back(static_cast<uint32_t>(ids_.size()));
    return static_cast<uint32_t>(byte_.size() - 1);
  };
  struct Open {
    uint32_t node, last_child;
  };
  std::vector<Open> path = {{add(0), kNone}};
  const std::string* prev = nullptr;
  for (int32_t id : order) {
    const std::string& t = tokens_[static_cast<size_t>(id)];
    max_len_ = std::max(max_len_, t.size());
    size_t common = 0;
    if (prev)
      while (common < prev->size() && common < t.size() && (*prev)[common] == t[common]) ++common;
    while (path.size() > common + 1) {  // close the nodes below the common prefix
      subtree_end_[path.back().node] = static_cast<uint32_t>(byte_.size());
      path.pop_back();
    }
    for (size_t d = common; d < t.size(); ++d) {
      const uint32_t n = add(static_cast<uint8_t>(t[d]));
      Open& parent = path.back();
      if (parent.last_child == kNone) first_child_[parent.node] = n;
      else next_sibling_[parent.last_child] = n;
      parent.last_child = n;
      path.push_back({n, kNone});
    }
    ids_.push_back(id);
    prev = &t;
  }
  while (!path.empty()) {
    subtree_end_[path.back().node] = static_cast<uint32_t>(byte_.size());
    path.pop_back();
  }
  ids_begin_.push_back(static_cast<uint32_t>(ids_.size()));  // sentinel: one past the last node
  plain_below_.assign(byte_.size(), 1);
  for (size_t n = byte_.size(); n-- > 0;)
    for (uint32_t c = first_child_[n]; c != kNone; c = next_sibling_[c])
      if (!PlainStringByte(byte_[c]) || !plain_below_[c]) plain_below_[n] = 0;
  quote_here_or_below_.assign(byte_.size(), 0);
  for (size_t n = byte_.size(); n-- > 0;) {
    if (n > 0 && byte_[n] == '"') quote_here_or_below_[n] = 1;
    for (uint32_t c = first_child_[n]; c != kNone; c = next_sibling_[c])
      if (quote_here_or_below_[c]) quote_here_or_below_[n] = 1;
  }
}

TokenMasker::TokenMasker(const TokenTrie& trie, const Matcher& matcher, size_t cache_bytes)
    : trie_(trie), matcher_(matcher), cache_limit_(cache_bytes), levels_(trie.max_len_ + 2) {}

void TokenMasker::SetIds(uint32_t begin, uint32_t end, std::vector<uint64_t>& bits) const {
  for (uint32_t x = begin; x < end; ++x) {
    const auto id = static_cast<uint32_t>(trie_.ids_[x]);
    bits[id >> 6] |= uint64_t{1} << (id & 63);
  }
}

void TokenMasker::Walk(uint32_t node, const State* s, size_t depth, std::vector<uint64_t>& bits, Mode mode,
                       size_t frames) {
  const TokenTrie& t = trie_;
  for (uint32_t c = t.first_child_[node]; c != TokenTrie::kNone; c = t.next_sibling_[c]) {
    if (mode == Mode::kClosing && !t.quote_here_or_below_[c]) continue;  // stays inside: the interior mask's
    const uint8_t b = t.byte_[c];
    const State* next = s;
    if (matcher_.Unchanged(*s, b)) {
      if (t.plain_below_[c] && mode != Mode::kClosing) {  // every token below stays inside the string
        SetIds(t.ids_begin_[c], t.ids_begin_[t.subtree_end_[c]], bits);
        continue;
      }
    } else {
      State& out = levels_[depth + 1];
      if (!matcher_.Feed(*s, b, out)) continue;
      next = &out;
    }
    Mode below = mode;
    if (mode != Mode::kAll && (next->ends.size() != 1 || next->frames.size() != frames)) {  // the string closed
      if (mode == Mode::kInterior) continue;
      below = Mode::kAll;
    }
    SetIds(t.ids_begin_[c], t.ids_begin_[c + 1], bits);
    if (t.first_child_[c] != TokenTrie::kNone) Walk(c, next, depth + 1, bits, below, frames);
  }
}

const std::vector<uint64_t>& TokenMasker::Interior(const State& s) {
  const std::string key = Matcher::InteriorKey(s);
  std::lock_guard<std::mutex> lock(trie_.interior_mu_);  // map nodes are stable: the reference outlives the lock
  if (const auto it = trie_.interior_.find(key); it != trie_.interior_.end()) return it->second;
  std::vector<uint64_t> bits(static_cast<size_t>((trie_.vocab() + 63) / 64), 0);
  Walk(0, &s, 0, bits, Mode::kInterior, s.frames.size());
  return trie_.interior_.emplace(key, std::move(bits)).first->second;
}

std::vector<uint64_t> TokenMasker::AllowedByFullWalk(const State& s) {
  std::vector<uint64_t> bits(static_cast<size_t>((trie_.vocab() + 63) / 64), 0);
  Walk(0, &s, 0, bits, Mode::kAll, 0);
  return bits;
}

const std::vector<uint64_t>& TokenMasker::Allowed(const State& s) {
  std::string key = s.Key();
  if (const auto it = cache_.find(key); it != cache_.end()) {
    ++hits_;
    return it->second;
  }
  ++misses_;
  const size_t words = static_cast<size_t>((trie_.vocab() + 63) / 64);
  if (string_split_ && matcher_.InPlainString(s)) {
    scratch_ = Interior(s);
    Walk(0, &s, 0, scratch_, Mode::kClosing, s.frames.size());
  } else {
    scratch_.assign(words, 0);
    Walk(0, &s, 0, scratch_, Mode::kAll, 0);
  }
  if ((cache_.size() + 1) * words * 8 > cache_limit_) cache_.clear();  // bounded; results never depend on it
  return cache_.emplace(std::move(key), scratch_).first->second;
}

void WarmStringInterior(const TokenTrie& trie) {
  const Matcher m(CompileSchema(nlohmann::ordered_json{{"type", "string"}}));
  State s;
  if (!m.Feed(m.Start(), '"', s) || !m.InPlainString(s)) return;
  TokenMasker(trie, m).Allowed(s);
}

}  // namespace k3::json_constraint
