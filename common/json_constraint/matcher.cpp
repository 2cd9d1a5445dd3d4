#include "matcher.h"

#include <cstring>

namespace k3::json_constraint {
namespace {

// Phases of each frame kind.
enum : uint8_t { kRootValue = 0, kRootDone = 1 };
enum : uint8_t { kObjStart, kObjOpen, kObjKey, kObjValue, kObjAfter, kObjComma, kObjColon, kObjFreeValue };
enum : uint8_t { kArrStart, kArrOpen, kArrAfter, kArrComma };
enum : uint8_t { kStrStart, kStrNormal, kStrUtf8, kStrEscape, kStrHexFirst, kStrHex };
enum : uint8_t { kNumStart, kNumMinus, kNumZero, kNumInt, kNumDot, kNumFrac, kNumE, kNumExpSign, kNumExp };

constexpr int32_t kMaxIntDigits = 16, kMaxFracDigits = 16, kMaxExpDigits = 2;  // below 1e116: a double

bool Digit(uint8_t b) { return b >= '0' && b <= '9'; }
bool Hex(uint8_t b) { return Digit(b) || (b >= 'a' && b <= 'f') || (b >= 'A' && b <= 'F'); }
bool NumberAccepting(uint8_t phase) {
  return phase == kNumZero || phase == kNumInt || phase == kNumFrac || phase == kNumExp;
}

// The first candidate in [j, end) whose text shares texts[j]'s first k bytes and has b next.
int32_t NextCandidate(const std::vector<std::string>& texts, int32_t j, int32_t end, int32_t k, uint8_t b) {
  const std::string& cur = texts[static_cast<size_t>(j)];
  for (int32_t c = j; c < end; ++c) {
    const std::string& t = texts[static_cast<size_t>(c)];
    if (t.size() > static_cast<size_t>(k) && static_cast<uint8_t>(t[static_cast<size_t>(k)]) == b &&
        t.compare(0, static_cast<size_t>(k), cur, 0, static_cast<size_t>(k)) == 0)
      return c;
  }
  return -1;
}

}  // namespace

bool State::operator==(const State& o) const {
  return ends == o.ends && frames.size() == o.frames.size() &&
         std::memcmp(frames.data(), o.frames.data(), frames.size() * sizeof(Frame)) == 0;
}

std::string State::Key() const {
  std::string k(ends.size() * sizeof(uint32_t) + frames.size() * sizeof(Frame), '\0');
  std::memcpy(k.data(), ends.data(), ends.size() * sizeof(uint32_t));
  std::memcpy(k.data() + ends.size() * sizeof(uint32_t), frames.data(), frames.size() * sizeof(Frame));
  return k;
}

Matcher::Matcher(Grammar g) : g_(std::move(g)) {}

State Matcher::Start() const {
  State s;
  s.frames.push_back(Frame{});
  s.ends.push_back(1);
  return s;
}

Frame Matcher::Fresh(int32_t node) const {
  Frame f;
  f.node = node;
  if (g_.nodes[static_cast<size_t>(node)].kind == Kind::kObject) f.i = -1;
  return f;
}

bool Matcher::LazyAccepting(const Frame& f) const {
  if (f.node < 0) return false;
  const Node& n = g_.nodes[static_cast<size_t>(f.node)];
  if (n.kind == Kind::kNumber || n.kind == Kind::kInteger) return NumberAccepting(f.phase);
  return n.kind == Kind::kLiterals && f.k > 0 && n.literals[static_cast<size_t>(f.j)].size() == static_cast<size_t>(f.k);
}

Matcher::Step Matcher::StepFrame(std::vector<Frame>& stack, uint8_t b, int32_t* value_node) const {
  Frame& f = stack.back();
  if (f.node < 0) {  // the root sentinel
    if (f.phase != kRootValue) return Step::kReject;
    f.phase = kRootDone;
    *value_node = g_.root;
    return Step::kValue;
  }
  const Node& n = g_.nodes[static_cast<size_t>(f.node)];
  switch (n.kind) {
    case Kind::kObject: {
      const auto count = static_cast<int32_t>(n.props.size());
      // Declared properties come in order: after property i, keys i+1 .. the next required one.
      auto start_key = [&](int32_t from) {
        if (n.free_keys) {
          f.phase = kObjColon;
          *value_node = g_.key_string;  // the string frame takes this '"'
          return Step::kValue;
        }
        if (from >= count) return Step::kReject;
        f.phase = kObjKey;
        f.j = from;
        f.k = 1;  // every key text starts with '"'
        return Step::kConsumed;
      };
      const bool may_close = n.free_keys || n.next_required[static_cast<size_t>(f.i + 1)] == count;
      switch (f.phase) {
        case kObjStart:
          if (b != '{') return Step::kReject;
          f.phase = kObjOpen;
          return Step::kConsumed;
        case kObjOpen:
          if (b == '}') return may_close ? Step::kDone : Step::kReject;
          return b == '"' ? start_key(f.i + 1) : Step::kReject;
        case kObjKey: {
          const int32_t end = std::min(n.next_required[static_cast<size_t>(f.i + 1)] + 1, count);
          // The candidates' key texts, searched in place (no copy): a small linear scan.
          int32_t c = -1;
          const std::string& cur = n.props[static_cast<size_t>(f.j)].key;
          for (int32_t x = f.j; x < end; ++x) {
            const std::string& t = n.props[static_cast<size_t>(x)].key;
            if (t.size() > static_cast<size_t>(f.k) && static_cast<uint8_t>(t[static_cast<size_t>(f.k)]) == b &&
                t.compare(0, static_cast<size_t>(f.k), cur, 0, static_cast<size_t>(f.k)) == 0) {
              c = x;
              break;
            }
          }
          if (c < 0) return Step::kReject;
          f.j = c;
          if (static_cast<size_t>(++f.k) == n.props[static_cast<size_t>(c)].key.size()) {
            f.i = c;
            f.phase = kObjValue;
          }
          return Step::kConsumed;
        }
        case kObjValue:
          f.phase = kObjAfter;
          *value_node = n.props[static_cast<size_t>(f.i)].node;
          return Step::kValue;
        case kObjAfter:
          if (b == '}') return may_close ? Step::kDone : Step::kReject;
          if (b != ',' || (!n.free_keys && f.i + 1 >= count)) return Step::kReject;
          f.phase = kObjComma;
          return Step::kConsumed;
        case kObjComma:
          return b == '"' ? start_key(f.i + 1) : Step::kReject;
        case kObjColon:
          if (b != ':') return Step::kReject;
          f.phase = kObjFreeValue;
          return Step::kConsumed;
        case kObjFreeValue:
          f.phase = kObjAfter;
          *value_node = g_.any;
          return Step::kValue;
      }
      return Step::kReject;
    }
    case Kind::kArray: {
      auto item = [&] {
        ++f.i;
        f.phase = kArrAfter;
        *value_node = n.items;
        return Step::kValue;
      };
      switch (f.phase) {
        case kArrStart:
          if (b != '[') return Step::kReject;
          f.phase = kArrOpen;
          return Step::kConsumed;
        case kArrOpen:
          if (b == ']') return n.min_items == 0 ? Step::kDone : Step::kReject;
          return n.max_items == 0 ? Step::kReject : item();
        case kArrAfter:
          if (b == ']') return f.i >= n.min_items ? Step::kDone : Step::kReject;
          if (b != ',' || (n.max_items >= 0 && f.i >= n.max_items)) return Step::kReject;
          f.phase = kArrComma;
          return Step::kConsumed;
        case kArrComma:
          return item();
      }
      return Step::kReject;
    }
    case Kind::kString:
      switch (f.phase) {
        case kStrStart:
          if (b != '"') return Step::kReject;
          f.phase = kStrNormal;
          return Step::kConsumed;
        case kStrNormal:
          if (n.format == Format::kUuid) {  // 8-4-4-4-12 lowercase hex digits
            if (b == '"') return f.i == 36 ? Step::kDone : Step::kReject;
            if (f.i >= 36) return Step::kReject;
            const bool dash = f.i == 8 || f.i == 13 || f.i == 18 || f.i == 23;
            if (dash ? b != '-' : !(Digit(b) || (b >= 'a' && b <= 'f'))) return Step::kReject;
            ++f.i;
            return Step::kConsumed;
          }
          if (b == '"') return Step::kDone;
          if (b == '\\') {
            f.phase = kStrEscape;
            return Step::kConsumed;
          }
          if (b < 0x20) return Step::kReject;
          if (b < 0x80) return Step::kConsumed;
          // UTF-8 lead bytes and the range of the byte after them (no overlongs, no surrogates, <= U+10FFFF).
          f.lo = 0x80;
          f.hi = 0xbf;
          if (b >= 0xc2 && b <= 0xdf) f.need = 1;
          else if (b >= 0xe0 && b <= 0xef) {
            f.need = 2;
            if (b == 0xe0) f.lo = 0xa0;
            if (b == 0xed) f.hi = 0x9f;
          } else if (b >= 0xf0 && b <= 0xf4) {
            f.need = 3;
            if (b == 0xf0) f.lo = 0x90;
            if (b == 0xf4) f.hi = 0x8f;
          } else {
            return Step::kReject;
          }
          f.phase = kStrUtf8;
          return Step::kConsumed;
        case kStrUtf8:
          if (b < f.lo || b > f.hi) return Step::kReject;
          f.lo = 0x80;
          f.hi = 0xbf;
          if (--f.need == 0) {
            f.phase = kStrNormal;
            f.lo = f.hi = 0;
          }
          return Step::kConsumed;
        case kStrEscape:
          if (b == 'u') {
            f.phase = kStrHexFirst;
            return Step::kConsumed;
          }
          if (!std::strchr("\"\\/bfnrt", b) || b == 0) return Step::kReject;
          f.phase = kStrNormal;
          return Step::kConsumed;
        case kStrHexFirst:
          if (!Hex(b) || b == 'd' || b == 'D') return Step::kReject;  // no U+D000..U+DFFF: no surrogates
          f.phase = kStrHex;
          f.need = 3;
          return Step::kConsumed;
        case kStrHex:
          if (!Hex(b)) return Step::kReject;
          if (--f.need == 0) f.phase = kStrNormal;
          return Step::kConsumed;
      }
      return Step::kReject;
    case Kind::kNumber:
    case Kind::kInteger: {
      const bool real = n.kind == Kind::kNumber;
      auto go = [&](uint8_t phase, int32_t digits) {
        f.phase = phase;
        f.i = digits;
        return Step::kConsumed;
      };
      auto end = [&] { return NumberAccepting(f.phase) ? Step::kDoneRefeed : Step::kReject; };
      switch (f.phase) {
        case kNumStart:
        case kNumMinus:
          if (b == '-' && f.phase == kNumStart) return go(kNumMinus, 0);
          if (b == '0') return go(kNumZero, 1);
          if (Digit(b)) return go(kNumInt, 1);
          return Step::kReject;
        case kNumZero:
        case kNumInt:
          if (Digit(b) && f.phase == kNumInt && f.i < kMaxIntDigits) return go(kNumInt, f.i + 1);
          if (real && b == '.') return go(kNumDot, 0);
          if (real && (b == 'e' || b == 'E')) return go(kNumE, 0);
          return end();
        case kNumDot:
          return Digit(b) ? go(kNumFrac, 1) : Step::kReject;
        case kNumFrac:
          if (Digit(b) && f.i < kMaxFracDigits) return go(kNumFrac, f.i + 1);
          if (b == 'e' || b == 'E') return go(kNumE, 0);
          return end();
        case kNumE:
          if (b == '+' || b == '-') return go(kNumExpSign, 0);
          return Digit(b) ? go(kNumExp, 1) : Step::kReject;
        case kNumExpSign:
          return Digit(b) ? go(kNumExp, 1) : Step::kReject;
        case kNumExp:
          if (Digit(b) && f.i < kMaxExpDigits) return go(kNumExp, f.i + 1);
          return end();
      }
      return Step::kReject;
    }
    case Kind::kLiterals: {
      const auto count = static_cast<int32_t>(n.literals.size());
      const int32_t c = NextCandidate(n.literals, f.j, count, f.k, b);
      if (c < 0) return LazyAccepting(f) ? Step::kDoneRefeed : Step::kReject;
      f.j = c;
      ++f.k;
      const std::string& t = n.literals[static_cast<size_t>(c)];
      if (t.size() != static_cast<size_t>(f.k)) return Step::kConsumed;
      // Complete; it ends here unless a longer literal shares it (sorted: the next one).
      const bool longer = c + 1 < count && n.literals[static_cast<size_t>(c + 1)].compare(0, t.size(), t) == 0;
      return longer ? Step::kConsumed : Step::kDone;
    }
    case Kind::kAnyOf:
      break;  // never a frame: its leaves are
  }
  return Step::kReject;
}

bool Matcher::StepStack(std::vector<Frame>& f, size_t base, uint8_t b, int32_t* value_node, bool* value) const {
  for (;;) {
    switch (StepFrame(f, b, value_node)) {
      case Step::kConsumed:
        return true;
      case Step::kReject:
        return false;
      case Step::kDone:
        f.pop_back();
        return true;
      case Step::kDoneRefeed:  // a number or literal ended at a byte that is not its own
        f.pop_back();
        if (f.size() <= base) return false;
        continue;
      case Step::kValue:
        *value = true;
        return true;
    }
  }
}

bool Matcher::Feed(const State& src, uint8_t b, State& dst) const {
  thread_local std::vector<Frame> saved;
  thread_local std::vector<int32_t> scratch;
  dst.frames.clear();
  dst.ends.clear();
  uint32_t begin = 0;
  for (uint32_t end : src.ends) {
    const size_t base = dst.frames.size();
    dst.frames.insert(dst.frames.end(), src.frames.begin() + begin, src.frames.begin() + end);
    begin = end;
    int32_t node = -1;
    bool value = false;
    if (!StepStack(dst.frames, base, b, &node, &value)) {
      dst.frames.resize(base);
      continue;
    }
    if (!value) {
      dst.ends.push_back(static_cast<uint32_t>(dst.frames.size()));
      continue;
    }
    // A value starts with b: one stack per alternative it may be, each fed b.
    if (dst.frames.size() - base > static_cast<size_t>(kMaxDepth)) {
      dst.frames.resize(base);
      continue;
    }
    saved.assign(dst.frames.begin() + static_cast<std::ptrdiff_t>(base), dst.frames.end());
    dst.frames.resize(base);
    for (int32_t leaf : Leaves(g_, node, scratch)) {
      const size_t at = dst.frames.size();
      dst.frames.insert(dst.frames.end(), saved.begin(), saved.end());
      dst.frames.push_back(Fresh(leaf));
      int32_t inner = -1;
      bool again = false;  // a fresh frame's first byte never starts another value
      if (StepStack(dst.frames, at, b, &inner, &again) && !again)
        dst.ends.push_back(static_cast<uint32_t>(dst.frames.size()));
      else
        dst.frames.resize(at);
    }
  }
  if (dst.ends.size() > 1) {  // alternatives that met again: keep one of each
    State out;
    uint32_t from = 0;
    for (uint32_t end : dst.ends) {
      bool dup = false;
      uint32_t ob = 0;
      for (uint32_t oe : out.ends) {
        if (oe - ob == end - from &&
            std::memcmp(&out.frames[ob], &dst.frames[from], (end - from) * sizeof(Frame)) == 0)
          dup = true;
        ob = oe;
      }
      if (!dup) {
        out.frames.insert(out.frames.end(), dst.frames.begin() + from, dst.frames.begin() + end);
        out.ends.push_back(static_cast<uint32_t>(out.frames.size()));
      }
      from = end;
    }
    dst = std::move(out);
  }
  return !dst.ends.empty();
}

bool Matcher::Accepting(const State& s) const {
  uint32_t begin = 0;
  for (uint32_t end : s.ends) {
    const uint32_t size = end - begin;
    if (size == 1 && s.frames[begin].phase == kRootDone) return true;
    if (size == 2 && LazyAccepting(s.frames[begin + 1])) return true;
    begin = end;
  }
  return false;
}

bool Matcher::Unchanged(const State& s, uint8_t b) const {
  if (s.ends.size() != 1 || !PlainStringByte(b)) return false;
  const Frame& f = s.frames.back();
  if (f.node < 0 || f.phase != kStrNormal) return false;
  const Node& n = g_.nodes[static_cast<size_t>(f.node)];
  return n.kind == Kind::kString && n.format == Format::kNone;
}

bool Matcher::InPlainString(const State& s) const {
  if (s.ends.size() != 1 || s.frames.empty()) return false;
  const Frame& f = s.frames.back();
  if (f.node < 0 || f.phase == kStrStart) return false;
  const Node& n = g_.nodes[static_cast<size_t>(f.node)];
  return n.kind == Kind::kString && n.format == Format::kNone;
}

std::string Matcher::InteriorKey(const State& s) {
  Frame f = s.frames.back();
  f.node = 0;
  return std::string(reinterpret_cast<const char*>(&f), sizeof f);
}

}  // namespace k3::json_constraint
