#include "constraint.h"

#include <algorithm>
#include <limits>

namespace k3::json_constraint {

Grammar CompileSchemaText(const std::string& schema_text) {
  nlohmann::ordered_json schema;
  try {
    schema = nlohmann::ordered_json::parse(schema_text);
  } catch (const nlohmann::json::exception& e) {
    throw SchemaError(std::string("the schema is not JSON: ") + e.what());
  }
  return CompileSchema(schema);
}

Constrained::Constrained(std::shared_ptr<Compiled> compiled, const TokenTrie& trie, std::vector<int32_t> after)
    : c_(std::move(compiled)), trie_(trie), after_(std::move(after)) {
  Point start;
  start.state = c_->matcher.Start();
  points_.push_back(std::move(start));
}

Constrained::Point Constrained::Advance(const Point& from, int32_t id) const {
  Point to;
  to.id = id;
  if (from.dead) {
    to.dead = true;
    return to;
  }
  if (from.after > 0 || (c_->matcher.Accepting(from.state) && !after_.empty() && id == after_[0])) {
    to.after = from.after + 1;
    return to;
  }
  if (id < 0 || id >= trie_.vocab() || trie_.bytes(id).empty()) {
    to.dead = true;
    return to;
  }
  State cur = from.state, next;
  for (char ch : trie_.bytes(id)) {
    if (!c_->matcher.Feed(cur, static_cast<uint8_t>(ch), next)) {
      to.dead = true;
      return to;
    }
    std::swap(cur, next);
  }
  to.state = std::move(cur);
  return to;
}

void Constrained::Sync(std::span<const int32_t> generated) {
  size_t same = 0;  // points_[0] is the start; points_[n] follows generated[n - 1]
  while (same < generated.size() && same + 1 < points_.size() && points_[same + 1].id == generated[same]) ++same;
  points_.resize(same + 1);
  for (size_t n = same; n < generated.size(); ++n) points_.push_back(Advance(points_.back(), generated[n]));
}

bool Constrained::Finished(std::span<const int32_t> generated) {
  Sync(generated);
  return points_.back().after >= static_cast<int32_t>(after_.size());
}

void Constrained::Mask(const float* logits, int64_t V, std::span<const int32_t> generated, std::vector<float>& out) {
  Sync(generated);
  const Point& p = points_.back();
  constexpr float kOff = -std::numeric_limits<float>::infinity();
  out.assign(static_cast<size_t>(V), kOff);
  auto only = [&](int32_t id) {
    if (id >= 0 && id < V) out[static_cast<size_t>(id)] = logits[id];
  };
  const int32_t last = after_.empty() ? -1 : after_.back();
  if (p.dead) return only(last);
  if (p.after > 0) return only(p.after < static_cast<int32_t>(after_.size()) ? after_[static_cast<size_t>(p.after)] : last);
  const std::vector<uint64_t>& bits = c_->masker.Allowed(p.state);
  const int64_t n = std::min(V, trie_.vocab());
  bool any = false;
  for (int64_t i = 0; i < n; ++i)
    if (Bit(bits, i)) {
      out[static_cast<size_t>(i)] = logits[i];
      any = true;
    }
  if (c_->matcher.Accepting(p.state) && !after_.empty()) {
    only(after_[0]);
    any = true;
  }
  if (!any) only(last);
}

}  // namespace k3::json_constraint
