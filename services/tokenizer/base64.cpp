#include "base64.h"

#include <array>
#include <cstdint>

namespace k3::tok {
namespace {

constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

// 0..63 for alphabet characters, -1 otherwise.
constexpr std::array<int8_t, 256> MakeTable() {
  std::array<int8_t, 256> t{};
  for (auto& v : t) v = -1;
  for (int i = 0; i < 64; ++i) t[static_cast<uint8_t>(kAlphabet[i])] = static_cast<int8_t>(i);
  return t;
}
constexpr std::array<int8_t, 256> kTable = MakeTable();

}  // namespace

std::optional<std::string> Base64Decode(std::string_view in) {
  if (in.empty() || in.size() % 4 != 0) return std::nullopt;
  size_t pad = 0;
  if (in.back() == '=') pad = (in[in.size() - 2] == '=') ? 2 : 1;
  std::string out;
  out.reserve(in.size() / 4 * 3);
  for (size_t i = 0; i < in.size(); i += 4) {
    const bool last = i + 4 == in.size();
    const size_t real = last ? 4 - pad : 4;  // symbols carrying data in this quad
    uint32_t acc = 0;
    for (size_t j = 0; j < 4; ++j) {
      const uint8_t c = static_cast<uint8_t>(in[i + j]);
      int v = 0;
      if (j < real) {
        v = kTable[c];
        if (v < 0) return std::nullopt;
      } else if (c != '=') {
        return std::nullopt;
      }
      acc = (acc << 6) | static_cast<uint32_t>(v);
    }
    out.push_back(static_cast<char>(acc >> 16));
    if (real >= 3) out.push_back(static_cast<char>((acc >> 8) & 0xFF));
    if (real == 4) out.push_back(static_cast<char>(acc & 0xFF));
    // Non-canonical encodings (stray low bits before the padding) are rejected.
    if (real == 3 && (acc & 0xFF) != 0) return std::nullopt;
    if (real == 2 && (acc & 0xFFFF) != 0) return std::nullopt;
  }
  return out;
}

std::string Base64Encode(std::string_view bytes) {
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 3 <= bytes.size(); i += 3) {
    const uint32_t v = (uint32_t{static_cast<uint8_t>(bytes[i])} << 16) |
                       (uint32_t{static_cast<uint8_t>(bytes[i + 1])} << 8) |
                       uint32_t{static_cast<uint8_t>(bytes[i + 2])};
    out += kAlphabet[v >> 18];
    out += kAlphabet[(v >> 12) & 63];
    out += kAlphabet[(v >> 6) & 63];
    out += kAlphabet[v & 63];
  }
  const size_t rest = bytes.size() - i;
  if (rest > 0) {
    uint32_t v = uint32_t{static_cast<uint8_t>(bytes[i])} << 16;
    if (rest == 2) v |= uint32_t{static_cast<uint8_t>(bytes[i + 1])} << 8;
    out += kAlphabet[v >> 18];
    out += kAlphabet[(v >> 12) & 63];
    out += rest == 2 ? kAlphabet[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

}  // namespace k3::tok
