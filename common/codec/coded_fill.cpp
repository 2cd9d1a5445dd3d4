#include "common/codec/coded_fill.h"

#include <cstdio>
#include <filesystem>

#include "common/error.h"

namespace k3::codec {
namespace {

constexpr uint64_t kAlign = 4096;
uint64_t AlignUp(uint64_t v) { return (v + kAlign - 1) / kAlign * kAlign; }

}  // namespace

std::vector<LayerRuns> RunsByLayer(const CodedTrunk& t) {
  std::vector<LayerRuns> out(static_cast<size_t>(t.num_layers + 1));
  std::vector<bool> seen(out.size(), false);
  for (size_t i = 0; i < t.runs.size(); ++i) {
    const CodedRun& r = t.runs[i];
    LayerRuns& l = out.at(static_cast<size_t>(r.layer));
    if (!seen[static_cast<size_t>(r.layer)]) l.first = i;
    else if (l.last != i) throw BadModel("coded trunk: the runs of " + RunOwner(t, r) + " are not consecutive");
    seen[static_cast<size_t>(r.layer)] = true;
    l.last = i + 1;
    l.source_bytes += r.end - r.begin;
    l.coded_bytes += r.coded_bytes;
  }
  return out;
}

CodedTrunk OpenCodedTrunk(const std::string& dir, const Checkpoint& ck, const ModelConfig& cfg) {
  CodedTrunk t = LoadCodedTrunk(dir + "/" + kCodedTrunkManifestFile);
  CheckCodedTrunkFits(t, ck, cfg, dir);
  const std::string data = dir + "/" + kCodedTrunkDataFile;
  std::error_code ec;
  const uint64_t size = std::filesystem::file_size(data, ec);
  if (ec) throw BadModel(data + ": cannot read the coded trunk's data file (" + ec.message() + ")");
  std::vector<uint8_t> header(kCodedHeaderBytes, 0);
  uint64_t got = 0;
  if (FILE* fp = std::fopen(data.c_str(), "rb")) {
    got = std::fread(header.data(), 1, header.size(), fp);
    std::fclose(fp);
  }
  CheckCodedHeader(header.data(), got, t, data);
  if (size != t.file_bytes)
    throw BadModel(data + ": " + std::to_string(size) + " bytes, the manifest says " + std::to_string(t.file_bytes) +
                   " (truncated or changed)");
  return t;
}

uint64_t CodedReadBytes(const CodedTrunk& t, const LayerRuns& l) {
  if (l.first == l.last) return 0;
  const CodedRun& b = t.runs[l.last - 1];
  return AlignUp(b.coded_offset + b.coded_bytes) - t.runs[l.first].coded_offset;
}

std::optional<CodedRead> PlanCodedRead(const CodedTrunk& t, const LayerRuns& l, uint64_t slot_bytes) {
  if (l.first == l.last) return std::nullopt;
  const CodedRun& a = t.runs[l.first];
  CodedRead rd;
  rd.file_offset = a.coded_offset;  // a multiple of 4096 (LoadCodedTrunk)
  rd.bytes = CodedReadBytes(t, l);
  if (rd.bytes > slot_bytes) return std::nullopt;
  rd.slot_offset = (slot_bytes - rd.bytes) / kAlign * kAlign;
  return rd;
}

std::vector<ParsedRun> ParseLayerRuns(const CodedTrunk& t, const LayerRuns& l, const CodedRead& rd, const uint8_t* slot,
                                      uint64_t out_offset, bool check_digest) {
  std::vector<ParsedRun> out;
  const uint64_t layer_begin = t.runs[l.first].begin;
  for (size_t i = l.first; i < l.last; ++i) {
    const CodedRun& r = t.runs[i];
    ParsedRun p;
    p.out_offset = out_offset + (r.begin - layer_begin);
    p.in_offset = rd.slot_offset + (r.coded_offset - rd.file_offset);
    const uint8_t* coded = slot + p.in_offset;
    const std::string what = "coded trunk run " + std::to_string(i) + " (" + RunOwner(t, r) + ")";
    if (check_digest && ExpertDigestOf(coded, r.coded_bytes) != r.coded_digest)
      throw BadModel(what + ": its coded bytes do not match the manifest's digest (run k3-model check)");
    uint64_t n = 0;
    try {
      p.frames = ParseRun(coded, r.coded_bytes, &n);
    } catch (const Error& e) {
      throw BadModel(what + ": " + e.what());
    }
    if (n != r.end - r.begin)
      throw BadModel(what + ": decodes to " + std::to_string(n) + " bytes, the manifest says " +
                     std::to_string(r.end - r.begin));
    out.push_back(std::move(p));
  }
  return out;
}

bool InPlaceFits(const std::vector<ParsedRun>& runs) {
  for (const ParsedRun& r : runs)
    for (const RunFrame& f : r.frames)
      if (r.out_offset + f.src_offset + f.info.decoded_bytes > r.in_offset + f.coded_offset) return false;
  return true;
}

void DecodeInPlace(const std::vector<ParsedRun>& runs, uint8_t* slot, Isa isa) {
  for (const ParsedRun& r : runs) DecodeFrames(r.frames, 0, r.frames.size(), slot + r.in_offset, slot + r.out_offset, isa);
}

}  // namespace k3::codec
