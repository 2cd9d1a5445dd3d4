#include "utf8.h"

#include <cstdint>
#include <cstring>

namespace k3::tok {
namespace {

// Allowed range of the second byte for each lead byte (Table 3-7); later bytes are 80..BF.
struct Lead {
  uint8_t len, lo, hi;
};
inline Lead LeadInfo(uint8_t b) {
  if (b < 0x80) return {1, 0, 0};
  if (b < 0xC2) return {0, 0, 0};
  if (b < 0xE0) return {2, 0x80, 0xBF};
  if (b == 0xE0) return {3, 0xA0, 0xBF};
  if (b == 0xED) return {3, 0x80, 0x9F};  // excludes surrogates
  if (b < 0xF0) return {3, 0x80, 0xBF};
  if (b == 0xF0) return {4, 0x90, 0xBF};
  if (b < 0xF4) return {4, 0x80, 0xBF};
  if (b == 0xF4) return {4, 0x80, 0x8F};  // nothing above U+10FFFF
  return {0, 0, 0};
}

}  // namespace

size_t Utf8CharLen(std::string_view s, size_t i) {
  const auto* p = reinterpret_cast<const uint8_t*>(s.data());
  const Lead l = LeadInfo(p[i]);
  if (l.len <= 1) return l.len;
  if (i + l.len > s.size()) return 0;
  if (p[i + 1] < l.lo || p[i + 1] > l.hi) return 0;
  for (size_t k = 2; k < l.len; ++k)
    if ((p[i + k] & 0xC0) != 0x80) return 0;
  return l.len;
}

size_t Utf8ValidPrefix(std::string_view s) {
  size_t i = 0;
  const size_t n = s.size();
  while (i < n) {
    // ASCII fast path: 8 bytes at a time while none has the high bit.
    while (i + 8 <= n) {
      uint64_t w;
      std::memcpy(&w, s.data() + i, 8);
      if (w & 0x8080808080808080ull) break;
      i += 8;
    }
    if (i >= n) break;
    const size_t len = Utf8CharLen(s, i);
    if (len == 0) return i;
    i += len;
  }
  return n;
}

size_t Utf8IncompleteTail(std::string_view s) {
  const auto* p = reinterpret_cast<const uint8_t*>(s.data());
  // A completable tail is a lead byte followed by fewer continuation bytes than it needs,
  // each within its allowed range.
  const size_t n = s.size();
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    const size_t start = n - back;
    const Lead l = LeadInfo(p[start]);
    if (l.len == 0 && (p[start] & 0xC0) == 0x80) continue;  // continuation: look further back
    if (l.len <= back) return 0;  // ASCII, invalid lead, or already complete
    if (back >= 2 && (p[start + 1] < l.lo || p[start + 1] > l.hi)) return 0;
    for (size_t k = 2; k < back; ++k)
      if ((p[start + k] & 0xC0) != 0x80) return 0;
    return back;
  }
  return 0;
}

}  // namespace k3::tok
