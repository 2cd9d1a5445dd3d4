#include "common/codec/coded_run.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "common/error.h"

namespace k3::codec {

namespace {

constexpr char kRunMagic[4] = {'K', '3', 'C', 'R'};

void Put(std::vector<uint8_t>& out, size_t at, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out[at + static_cast<size_t>(i)] = static_cast<uint8_t>(v >> (8 * i));
}

uint64_t Get(const uint8_t* p, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = v << 8 | p[i];
  return v;
}

[[noreturn]] void Corrupt(const std::string& why) { throw BadModel("coded run " + why); }
// A frame's own message, with its place in the run.
[[noreturn]] void FrameCorrupt(const Error& err, uint64_t i, uint64_t count) {
  throw BadModel("coded run: " + std::string(err.what()) + " (frame " + std::to_string(i) + " of " +
                 std::to_string(count) + ")");
}

}  // namespace

std::vector<FramePiece> PlanFramePieces(uint64_t n, const std::vector<Bf16Span>& spans) {
  std::vector<FramePiece> pieces;
  auto cut = [&](uint64_t from, uint64_t to, bool bf16) {
    const uint64_t step = bf16 ? 2ull * kFrameValues : kRawFrameBytes;
    for (uint64_t at = from; at < to; at += step) pieces.push_back({at, std::min(step, to - at), bf16});
  };
  uint64_t at = 0;
  for (const Bf16Span& s : spans) {
    if (s.offset < at || s.offset + s.bytes > n || s.bytes % 2 != 0)
      throw RuntimeFailure("codec: bf16 spans are unsorted, overlapping, odd or outside the run");
    cut(at, s.offset, false);
    cut(s.offset, s.offset + s.bytes, true);
    at = s.offset + s.bytes;
  }
  cut(at, n, false);
  return pieces;
}

std::vector<uint8_t> EncodeRun(const uint8_t* src, uint64_t n, const std::vector<Bf16Span>& spans) {
  const std::vector<FramePiece> pieces = PlanFramePieces(n, spans);
  std::vector<uint8_t> out(kRunHeaderBytes + kRunEntryBytes * pieces.size());
  std::memcpy(out.data(), kRunMagic, 4);
  Put(out, 4, kRunVersion, 4);
  Put(out, 8, n, 8);
  Put(out, 16, pieces.size(), 4);
  const size_t body = out.size();
  for (size_t i = 0; i < pieces.size(); ++i) {
    Put(out, kRunHeaderBytes + kRunEntryBytes * i, pieces[i].offset, 8);
    Put(out, kRunHeaderBytes + kRunEntryBytes * i + 8, out.size() - body, 8);
    EncodeFrame(src + pieces[i].offset, pieces[i].bytes, pieces[i].bf16, out);
  }
  Put(out, 24, out.size() - body, 8);
  return out;
}

std::vector<RunFrame> ParseRun(const uint8_t* coded, uint64_t coded_bytes, uint64_t* src_bytes) {
  if (coded_bytes < kRunHeaderBytes) Corrupt("is cut short (" + std::to_string(coded_bytes) + " bytes)");
  if (std::memcmp(coded, kRunMagic, 4) != 0) Corrupt("does not start with K3CR (not a coded run)");
  if (Get(coded + 4, 4) != kRunVersion)
    Corrupt("has version " + std::to_string(Get(coded + 4, 4)) + "; this k3 reads version " + std::to_string(kRunVersion));
  const uint64_t n = Get(coded + 8, 8), count = Get(coded + 16, 4), body_bytes = Get(coded + 24, 8);
  if (Get(coded + 20, 4) != 0) Corrupt("has a non-zero reserved field");
  const uint64_t dir_end = kRunHeaderBytes + kRunEntryBytes * count;
  if (dir_end > coded_bytes || coded_bytes - dir_end != body_bytes)
    Corrupt("of " + std::to_string(coded_bytes) + " bytes cannot hold " + std::to_string(count) + " frames and a body of " +
            std::to_string(body_bytes) + " bytes");
  if ((count == 0) != (n == 0)) Corrupt("has " + std::to_string(count) + " frames for " + std::to_string(n) + " bytes");
  std::vector<RunFrame> frames(count);
  for (uint64_t i = 0; i < count; ++i) {
    const uint8_t* e = coded + kRunHeaderBytes + kRunEntryBytes * i;
    frames[i].src_offset = Get(e, 8);
    frames[i].coded_offset = Get(e + 8, 8);
  }
  for (uint64_t i = 0; i < count; ++i) {
    const uint64_t src_end = i + 1 < count ? frames[i + 1].src_offset : n;
    const uint64_t coded_end = i + 1 < count ? frames[i + 1].coded_offset : body_bytes;
    const uint64_t src_begin = frames[i].src_offset, coded_begin = frames[i].coded_offset;
    if ((i == 0 && (src_begin != 0 || coded_begin != 0)) || src_end <= src_begin || coded_end <= coded_begin ||
        src_end > n || coded_end > body_bytes)
      Corrupt("directory entry " + std::to_string(i) + " is out of order or outside the run");
    try {
      frames[i].info = ParseFrame(coded + dir_end + coded_begin, coded_end - coded_begin);
    } catch (const Error& err) {
      FrameCorrupt(err, i, count);
    }
    if (frames[i].info.coded_bytes != coded_end - coded_begin || frames[i].info.decoded_bytes != src_end - src_begin)
      Corrupt("frame " + std::to_string(i) + " does not fill its directory entry");
    frames[i].coded_offset += dir_end;
  }
  *src_bytes = n;
  return frames;
}

void DecodeFrames(const std::vector<RunFrame>& frames, size_t first, size_t last, const uint8_t* coded, uint8_t* dst,
                  Isa isa) {
  for (size_t i = first; i < last; ++i) {
    try {
      DecodeFrame(frames[i].info, coded + frames[i].coded_offset, dst + frames[i].src_offset, isa);
    } catch (const Error& err) {
      FrameCorrupt(err, i, frames.size());
    }
  }
}

void DecodeRun(const uint8_t* coded, uint64_t coded_bytes, uint8_t* dst, uint64_t dst_bytes, Isa isa) {
  uint64_t n = 0;
  const std::vector<RunFrame> frames = ParseRun(coded, coded_bytes, &n);
  if (n != dst_bytes) Corrupt("decodes to " + std::to_string(n) + " bytes, expected " + std::to_string(dst_bytes));
  DecodeFrames(frames, 0, frames.size(), coded, dst, isa);
}

}  // namespace k3::codec
