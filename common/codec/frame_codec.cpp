// The bf16 frame: encoder, header checks and the decoder around the two bodies (frame_bodies.h).
#include "common/codec/frame_codec.h"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <string>

#include "common/codec/frame_bodies.h"
#include "common/error.h"

namespace k3::codec {

namespace {

void Put32(std::vector<uint8_t>& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

uint32_t Get32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);  // the format is little-endian, as is every CPU k3 builds for
  return v;
}

uint64_t Bf16CodedBytes(uint64_t values, uint64_t escapes, uint64_t raw_escapes) {
  return kBf16HeaderBytes + (values + kGroupValues - 1) / kGroupValues * kGroupBytes + (escapes + 1) / 2 + raw_escapes;
}

void EncodeRaw(const uint8_t* bytes, size_t n, std::vector<uint8_t>& out) {
  out.push_back(static_cast<uint8_t>(FrameKind::kRaw));
  out.insert(out.end(), 3, 0);
  Put32(out, static_cast<uint32_t>(n));
  out.insert(out.end(), bytes, bytes + n);
}

[[noreturn]] void Corrupt(const std::string& why) { throw BadModel("frame " + why); }

}  // namespace

void EncodeFrame(const uint8_t* bytes, size_t n_bytes, bool bf16, std::vector<uint8_t>& out) {
  if (n_bytes == 0) throw RuntimeFailure("codec: an empty frame");
  if (!bf16) {
    if (n_bytes > kRawFrameBytes) throw RuntimeFailure("codec: a raw frame above " + std::to_string(kRawFrameBytes) + " bytes");
    EncodeRaw(bytes, n_bytes, out);
    return;
  }
  if (n_bytes % 2 != 0 || n_bytes / 2 > kFrameValues)
    throw RuntimeFailure("codec: a bf16 frame of " + std::to_string(n_bytes) + " bytes");
  const size_t n = n_bytes / 2;
  std::array<uint64_t, 256> count{};
  for (size_t i = 0; i < n; ++i) ++count[bytes[2 * i + 1]];
  // High bytes by falling count, ties by value: the first 7 get an index, the next 15 a nibble.
  std::array<int, 256> order;
  for (int b = 0; b < 256; ++b) order[b] = b;
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return count[a] > count[b]; });
  std::array<int, 256> code;  // 0..6 index, 16 + k escape nibble k, 31 raw escape
  code.fill(31);
  uint8_t table[8] = {}, esc_table[16] = {};
  uint64_t escapes = 0, raw_escapes = 0;
  for (int r = 0; r < 256; ++r) {
    const int b = order[r];
    if (r < kTableSize) {
      code[b] = r;
      table[r] = static_cast<uint8_t>(b);
    } else if (r < kTableSize + kEscTableSize) {
      code[b] = 16 + (r - kTableSize);
      esc_table[r - kTableSize] = static_cast<uint8_t>(b);
      escapes += count[b];
    } else {
      escapes += count[b];
      raw_escapes += count[b];
    }
  }
  // A table slot whose byte never occurs stays 0 (it decodes nothing); so do unused nibbles.
  for (int r = 0; r < kTableSize; ++r)
    if (count[table[r]] == 0) table[r] = 0;
  for (int r = 0; r < kEscTableSize; ++r)
    if (count[esc_table[r]] == 0) esc_table[r] = 0;
  if (Bf16CodedBytes(n, escapes, raw_escapes) >= kRawHeaderBytes + n_bytes) {
    EncodeRaw(bytes, n_bytes, out);
    return;
  }
  const size_t start = out.size();
  out.push_back(static_cast<uint8_t>(FrameKind::kBf16));
  out.insert(out.end(), 3, 0);
  Put32(out, static_cast<uint32_t>(n));
  out.insert(out.end(), table, table + 8);
  out.insert(out.end(), esc_table, esc_table + 16);
  Put32(out, static_cast<uint32_t>(escapes));
  Put32(out, static_cast<uint32_t>(raw_escapes));
  std::vector<uint8_t> nibbles, raws;
  for (size_t g0 = 0; g0 < n; g0 += kGroupValues) {
    uint32_t plane[3] = {};
    uint8_t low[kGroupValues] = {};
    for (size_t i = 0; i < kGroupValues && g0 + i < n; ++i) {
      const uint8_t hi = bytes[2 * (g0 + i) + 1];
      low[i] = bytes[2 * (g0 + i)];
      const int c = code[hi];
      const unsigned idx = c < 16 ? static_cast<unsigned>(c) : 7u;
      for (int k = 0; k < 3; ++k) plane[k] |= ((idx >> k) & 1u) << i;
      if (c >= 16) {
        nibbles.push_back(static_cast<uint8_t>(c - 16));
        if (c == 31) raws.push_back(hi);
      }
    }
    for (uint32_t p : plane) Put32(out, p);
    out.insert(out.end(), low, low + kGroupValues);
  }
  for (size_t j = 0; j < nibbles.size(); j += 2)
    out.push_back(static_cast<uint8_t>(nibbles[j] | (j + 1 < nibbles.size() ? nibbles[j + 1] << 4 : 0)));
  out.insert(out.end(), raws.begin(), raws.end());
  if (out.size() - start != Bf16CodedBytes(n, escapes, raw_escapes)) throw RuntimeFailure("codec: frame size mismatch");
}

FrameInfo ParseFrame(const uint8_t* p, size_t avail) {
  FrameInfo f;
  if (avail < kRawHeaderBytes) Corrupt("header is cut short");
  if (p[1] != 0 || p[2] != 0 || p[3] != 0) Corrupt("header has non-zero padding");
  f.count = Get32(p + 4);
  if (p[0] == static_cast<uint8_t>(FrameKind::kRaw)) {
    f.kind = FrameKind::kRaw;
    if (f.count == 0 || f.count > kRawFrameBytes) Corrupt("has a raw length of " + std::to_string(f.count));
    f.decoded_bytes = f.count;
    f.coded_bytes = kRawHeaderBytes + f.count;
  } else if (p[0] == static_cast<uint8_t>(FrameKind::kBf16)) {
    f.kind = FrameKind::kBf16;
    if (avail < kBf16HeaderBytes) Corrupt("header is cut short");
    if (f.count == 0 || f.count > kFrameValues) Corrupt("has a bf16 count of " + std::to_string(f.count));
    std::memcpy(f.table, p + 8, 8);
    std::memcpy(f.esc_table, p + 16, 16);
    f.escapes = Get32(p + 32);
    f.raw_escapes = Get32(p + 36);
    if (f.table[7] != 0 || f.esc_table[15] != 0) Corrupt("has a non-zero unused table entry");
    if (f.escapes > f.count || f.raw_escapes > f.escapes)
      Corrupt("counts " + std::to_string(f.escapes) + " escapes (" + std::to_string(f.raw_escapes) + " raw) in " +
              std::to_string(f.count) + " values");
    f.decoded_bytes = 2ull * f.count;
    f.coded_bytes = Bf16CodedBytes(f.count, f.escapes, f.raw_escapes);
  } else {
    Corrupt("has an unknown kind " + std::to_string(p[0]));
  }
  if (f.coded_bytes > avail)
    Corrupt("needs " + std::to_string(f.coded_bytes) + " bytes, " + std::to_string(avail) + " are left");
  return f;
}

bool detail::CpuHasAvx2() {
  static const bool has = __builtin_cpu_supports("avx2");
  return has;
}

Isa ResolveIsa(Isa isa) {
  if (isa == Isa::kAuto) {
    static const Isa best = [] {
      const char* force = std::getenv("K3_FORCE_SCALAR");
      const bool forced = force != nullptr && std::strcmp(force, "1") == 0;
      return !forced && detail::CpuHasAvx2() ? Isa::kAvx2 : Isa::kScalar;
    }();
    return best;
  }
  if (isa == Isa::kAvx2 && !detail::CpuHasAvx2()) throw RuntimeFailure("codec: the AVX2 decoder on a CPU without AVX2");
  return isa;
}

const char* IsaName(Isa isa) {
  switch (ResolveIsa(isa)) {
    case Isa::kAvx2: return "avx2";
    default: return "scalar";
  }
}

void DecodeFrame(const FrameInfo& f, const uint8_t* p, uint8_t* dst, Isa isa) {
  if (f.kind == FrameKind::kRaw) {
    std::memcpy(dst, p + kRawHeaderBytes, f.count);
    return;
  }
  const size_t n = f.count, whole = n / kGroupValues;
  const uint8_t* groups = p + kBf16HeaderBytes;
  const uint8_t* nibbles = groups + (n + kGroupValues - 1) / kGroupValues * kGroupBytes;
  const uint8_t* raws = nibbles + (f.escapes + 1) / 2;
  // The escapes' high bytes, in order (reused per thread: frames are decoded by the thousand).
  thread_local std::vector<uint8_t> esc;
  esc.resize(f.escapes + 32);  // the AVX2 body's slack (frame_bodies.h)
  const bool avx2 = ResolveIsa(isa) == Isa::kAvx2;
  const uint64_t r = avx2 ? detail::ExpandEscapesAvx2(nibbles, f.escapes, f.esc_table, raws, f.raw_escapes, esc.data())
                          : detail::ExpandEscapesScalar(nibbles, f.escapes, f.esc_table, raws, f.raw_escapes, esc.data());
  if (r != f.raw_escapes)
    Corrupt("has " + std::string(r > f.raw_escapes ? "more" : "fewer") + " raw escapes than its header's " +
            std::to_string(f.raw_escapes));
  if (f.escapes % 2 != 0 && (nibbles[f.escapes / 2] >> 4) != 0) Corrupt("has a non-zero padding nibble");
  uint64_t seen = avx2 ? detail::DecodeGroupsAvx2(groups, whole, f.table, esc.data(), f.escapes, dst)
                                                : detail::DecodeGroupsScalar(groups, whole, f.table, esc.data(), f.escapes, dst);
  if (seen > f.escapes) Corrupt("has more escaped values than its header's " + std::to_string(f.escapes));
  if (const size_t tail = n - whole * kGroupValues; tail > 0) {
    // The last, partial group: decoded into a whole one, then copied; its padding must be zero.
    const uint8_t* g = groups + whole * kGroupBytes;
    uint8_t full[2 * kGroupValues];
    seen += detail::DecodeGroupsScalar(g, 1, f.table, esc.data() + seen, f.escapes - seen, full);
    for (size_t i = tail; i < kGroupValues; ++i) {
      uint32_t plane[3];
      std::memcpy(plane, g, sizeof plane);
      if (((plane[0] | plane[1] | plane[2]) >> i) & 1u || g[12 + i] != 0) Corrupt("has non-zero padding in its last group");
    }
    std::memcpy(dst + 2 * whole * kGroupValues, full, 2 * tail);
  }
  if (seen != f.escapes)
    Corrupt("has " + std::to_string(seen) + " escaped values, its header says " + std::to_string(f.escapes));
}

}  // namespace k3::codec
