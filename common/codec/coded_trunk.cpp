#include "common/codec/coded_trunk.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <set>

#include "common/error.h"
#include "common/json_strict.h"
#include "common/tensor_names.h"
#include "common/user_file.h"

namespace k3::codec {

namespace {

constexpr char kHeaderMagic[8] = {'K', '3', 'T', 'R', 'U', 'N', 'K', 'C'};

void Put(uint8_t* p, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}

uint64_t Get(const uint8_t* p, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = v << 8 | p[i];
  return v;
}

bool ParseHex(const std::string& h, ExpertDigest& d) {
  auto val = [](char c) { return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1; };
  if (h.size() != 2 * d.size()) return false;
  for (size_t i = 0; i < d.size(); ++i) {
    const int hi = val(h[2 * i]), lo = val(h[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    d[i] = static_cast<uint8_t>(hi << 4 | lo);
  }
  return true;
}

}  // namespace

std::vector<CodedRun> CutRun(const CodedRun& whole, uint64_t max_bytes) {
  const uint64_t n = whole.end - whole.begin;
  std::vector<CodedRun> out;
  auto close = [&](uint64_t from, uint64_t to) {
    CodedRun r;
    r.layer = whole.layer;
    r.shard = whole.shard;
    r.begin = whole.begin + from;
    r.end = whole.begin + to;
    for (const Bf16Span& s : whole.spans) {
      const uint64_t b = std::max(s.offset, from), e = std::min(s.offset + s.bytes, to);
      if (b < e) r.spans.push_back({b - from, e - b});
    }
    out.push_back(std::move(r));
  };
  uint64_t from = 0;
  for (const FramePiece& p : PlanFramePieces(n, whole.spans)) {
    if (p.offset > from && p.offset + p.bytes - from > max_bytes) {
      close(from, p.offset);
      from = p.offset;
    }
  }
  if (n > from || out.empty()) close(from, n);
  return out;
}

std::vector<CodedRun> PlanCodedRuns(const Checkpoint& ck, const ModelConfig& cfg) {
  std::vector<CodedRun> runs;
  for (int64_t unit = 0; unit <= cfg.num_layers; ++unit) {
    const ByteRange range =
        unit < cfg.num_layers ? LayerTrunkRange(ck, cfg, static_cast<int>(unit)) : GlobalsRange(ck);
    CodedRun whole;
    whole.layer = unit;
    whole.shard = range.shard;
    whole.begin = static_cast<uint64_t>(range.begin);
    whole.end = static_cast<uint64_t>(range.end);
    // The BF16 tensors inside the range (a shard's tensors are sorted by offset).
    for (const auto& [name, t] : ck.all()) {
      if (t.shard != range.shard || t.dtype != DType::BF16 || t.nbytes == 0) continue;
      if (t.file_offset < range.begin || t.file_offset + t.nbytes > range.end) continue;
      whole.spans.push_back({static_cast<uint64_t>(t.file_offset - range.begin), static_cast<uint64_t>(t.nbytes)});
    }
    std::sort(whole.spans.begin(), whole.spans.end(), [](const Bf16Span& a, const Bf16Span& b) { return a.offset < b.offset; });
    for (CodedRun& r : CutRun(whole, kMaxRunSourceBytes)) runs.push_back(std::move(r));
  }
  return runs;
}

ExpertDigest PackId(const std::vector<CodedRun>& runs) {
  std::vector<uint8_t> all;
  for (const CodedRun& r : runs) all.insert(all.end(), r.digest.begin(), r.digest.end());
  return DigestBytes(all.data(), all.size());
}

void CheckCodedTrunkFits(const CodedTrunk& t, const Checkpoint& ck, const ModelConfig& cfg, const std::string& what) {
  auto bad = [&](const std::string& why) { return BadModel(what + " is not a coded trunk of " + ck.dir() + ": " + why); };
  if (t.num_layers != cfg.num_layers)
    throw bad(std::to_string(t.num_layers) + " layers, the model has " + std::to_string(cfg.num_layers));
  if (t.shards.size() != ck.shard_paths().size())
    throw bad(std::to_string(t.shards.size()) + " shards, the model has " + std::to_string(ck.shard_paths().size()));
  for (size_t i = 0; i < t.shards.size(); ++i) {
    const std::string& p = ck.shard_paths()[i];
    std::error_code ec;
    const uint64_t size = std::filesystem::file_size(p, ec);
    if (t.shards[i].file != std::filesystem::path(p).filename().string() || ec || size != t.shards[i].bytes)
      throw bad("it was packed from " + t.shards[i].file + " of " + std::to_string(t.shards[i].bytes) + " bytes, the model has " +
                std::filesystem::path(p).filename().string() + " of " + (ec ? ec.message() : std::to_string(size) + " bytes"));
  }
  const std::vector<CodedRun> want = PlanCodedRuns(ck, cfg);
  if (want.size() != t.runs.size())
    throw bad(std::to_string(t.runs.size()) + " runs, the model's trunk makes " + std::to_string(want.size()));
  for (size_t i = 0; i < want.size(); ++i)
    if (want[i].layer != t.runs[i].layer || want[i].shard != t.runs[i].shard || want[i].begin != t.runs[i].begin ||
        want[i].end != t.runs[i].end)
      throw bad("run " + std::to_string(i) + " codes bytes " + std::to_string(t.runs[i].begin) + ".." +
                std::to_string(t.runs[i].end) + " of shard " + std::to_string(t.runs[i].shard) + ", the model's trunk has " +
                std::to_string(want[i].begin) + ".." + std::to_string(want[i].end) + " of shard " + std::to_string(want[i].shard));
}

std::string RunOwner(const CodedTrunk& t, const CodedRun& r) {
  return r.layer == t.num_layers ? "the globals" : "layer " + std::to_string(r.layer);
}

std::string CodedTrunkJson(const CodedTrunk& t) {
  // By hand, one run per line (diffable, greppable), like the expert manifest.
  std::string out = "{\n  \"format\": \"" + std::string(kCodedTrunkFormat) + "\",\n  \"version\": " +
                    std::to_string(kCodedTrunkVersion) + ",\n  \"codec\": \"" + kCodedTrunkCodec + "\",\n  \"hash\": \"" +
                    kManifestHash + "\",\n  \"chunk_bytes\": " + std::to_string(kDigestChunkBytes) +
                    ",\n  \"num_layers\": " + std::to_string(t.num_layers) + ",\n  \"file\": \"" + kCodedTrunkDataFile +
                    "\",\n  \"file_bytes\": " + std::to_string(t.file_bytes) + ",\n  \"pack_id\": \"" +
                    DigestHex(t.pack_id) + "\",\n  \"shards\": [";
  for (size_t i = 0; i < t.shards.size(); ++i)
    out += std::string(i ? "," : "") + "\n    {\"file\": " + nlohmann::json(t.shards[i].file).dump() +
           ", \"bytes\": " + std::to_string(t.shards[i].bytes) + "}";
  out += "\n  ],\n  \"runs\": [";
  for (size_t i = 0; i < t.runs.size(); ++i) {
    const CodedRun& r = t.runs[i];
    out += std::string(i ? "," : "") + "\n    {\"layer\": " + std::to_string(r.layer) + ", \"shard\": " +
           std::to_string(r.shard) + ", \"begin\": " + std::to_string(r.begin) + ", \"end\": " + std::to_string(r.end) +
           ", \"sha256\": \"" + DigestHex(r.digest) + "\", \"coded_offset\": " + std::to_string(r.coded_offset) +
           ", \"coded_bytes\": " + std::to_string(r.coded_bytes) + ", \"coded_sha256\": \"" + DigestHex(r.coded_digest) +
           "\"}";
  }
  out += "\n  ]\n}\n";
  return out;
}

CodedTrunk LoadCodedTrunk(const std::string& path) {
  const nlohmann::json j =
      ParseJsonStrict(ReadUserFile(path, kMaxModelJsonBytes, "coded trunk manifest", kExitBadModel), path + " (coded trunk manifest)");
  auto bad = [&](const std::string& why) { return BadModel(path + ": coded trunk manifest " + why); };
  if (!j.is_object()) throw bad("is not a JSON object");
  static const std::set<std::string> kKeys = {"format", "version", "codec",   "hash",   "chunk_bytes", "num_layers",
                                              "file",   "file_bytes", "pack_id", "shards", "runs"};
  for (auto it = j.begin(); it != j.end(); ++it)
    if (!kKeys.count(it.key())) throw bad("has an unknown key '" + Printable(it.key()) + "'");
  for (const std::string& k : kKeys)
    if (!j.contains(k)) throw bad("lacks '" + k + "' (truncated or not a coded trunk manifest?)");
  auto text_is = [&](const char* k, const std::string& want) {
    if (!j[k].is_string() || j[k].get<std::string>() != want) throw bad("'" + std::string(k) + "' is not \"" + want + "\"");
  };
  text_is("format", kCodedTrunkFormat);
  if (!j["version"].is_number_integer() || j["version"].get<int64_t>() != kCodedTrunkVersion)
    throw bad("has version " + j["version"].dump() + "; this k3 reads version " + std::to_string(kCodedTrunkVersion));
  text_is("codec", kCodedTrunkCodec);
  text_is("hash", kManifestHash);
  text_is("file", kCodedTrunkDataFile);
  if (!j["chunk_bytes"].is_number_unsigned() || j["chunk_bytes"].get<uint64_t>() != kDigestChunkBytes)
    throw bad("'chunk_bytes' is not " + std::to_string(kDigestChunkBytes));
  auto number = [&](const nlohmann::json& v, const std::string& what, uint64_t limit) {
    if (!v.is_number_unsigned() || v.get<uint64_t>() > limit) throw bad(what + " is not an integer in [0, " + std::to_string(limit) + "]");
    return v.get<uint64_t>();
  };
  auto digest = [&](const nlohmann::json& v, const std::string& what) {
    ExpertDigest d{};
    if (!v.is_string() || !ParseHex(v.get<std::string>(), d)) throw bad(what + " is not 64 lower-case hex digits");
    return d;
  };
  CodedTrunk t;
  t.num_layers = static_cast<int64_t>(number(j["num_layers"], "'num_layers'", 1 << 16));
  t.file_bytes = number(j["file_bytes"], "'file_bytes'", uint64_t{1} << 60);
  t.pack_id = digest(j["pack_id"], "'pack_id'");
  if (!j["shards"].is_array() || j["shards"].empty()) throw bad("'shards' is not a non-empty list");
  for (const auto& s : j["shards"]) {
    if (!s.is_object() || s.size() != 2 || !s.contains("file") || !s.contains("bytes") || !s["file"].is_string())
      throw bad("has a shard that is not {\"file\": NAME, \"bytes\": SIZE}");
    const std::string file = s["file"].get<std::string>();
    if (file.empty() || file.find('/') != std::string::npos || file == "." || file == "..")
      throw bad("names shard '" + Printable(file) + "', not a file name");
    t.shards.push_back({file, number(s["bytes"], "a shard size", uint64_t{1} << 60)});
  }
  if (!j["runs"].is_array() || j["runs"].empty()) throw bad("'runs' is not a non-empty list");
  static const std::set<std::string> kRunKeys = {"layer", "shard", "begin", "end", "sha256", "coded_offset", "coded_bytes", "coded_sha256"};
  uint64_t next_offset = kCodedHeaderBytes;
  for (const auto& e : j["runs"]) {
    const std::string at = "run " + std::to_string(t.runs.size());
    if (!e.is_object() || e.size() != kRunKeys.size()) throw bad(at + " is not an object with " + std::to_string(kRunKeys.size()) + " keys");
    for (const std::string& k : kRunKeys)
      if (!e.contains(k)) throw bad(at + " lacks '" + k + "'");
    CodedRun r;
    r.layer = static_cast<int64_t>(number(e["layer"], at + " 'layer'", static_cast<uint64_t>(t.num_layers)));
    r.shard = static_cast<int>(number(e["shard"], at + " 'shard'", t.shards.size() - 1));
    r.begin = number(e["begin"], at + " 'begin'", t.shards[static_cast<size_t>(r.shard)].bytes);
    r.end = number(e["end"], at + " 'end'", t.shards[static_cast<size_t>(r.shard)].bytes);
    r.digest = digest(e["sha256"], at + " 'sha256'");
    r.coded_offset = number(e["coded_offset"], at + " 'coded_offset'", t.file_bytes);
    r.coded_bytes = number(e["coded_bytes"], at + " 'coded_bytes'", t.file_bytes);
    r.coded_digest = digest(e["coded_sha256"], at + " 'coded_sha256'");
    if (r.end <= r.begin) throw bad(at + " codes no bytes (begin " + std::to_string(r.begin) + ", end " + std::to_string(r.end) + ")");
    if (r.coded_offset % kCodedHeaderBytes != 0 || r.coded_offset < next_offset || r.coded_bytes < kRunHeaderBytes ||
        r.coded_bytes > t.file_bytes - r.coded_offset)
      throw bad(at + " is not at a 4096-aligned offset after the previous run, inside the file");
    next_offset = r.coded_offset + r.coded_bytes;
    t.runs.push_back(std::move(r));
  }
  return t;
}

std::array<uint8_t, kCodedHeaderBytes> CodedHeader(const CodedTrunk& t) {
  std::array<uint8_t, kCodedHeaderBytes> h{};
  std::memcpy(h.data(), kHeaderMagic, 8);
  Put(h.data() + 8, kCodedTrunkVersion, 4);
  Put(h.data() + 12, t.runs.size(), 4);
  std::memcpy(h.data() + 16, t.pack_id.data(), 32);
  Put(h.data() + 48, t.file_bytes, 8);
  return h;
}

void CheckCodedHeader(const uint8_t* h, uint64_t got, const CodedTrunk& t, const std::string& path) {
  if (got < kCodedHeaderBytes) throw BadModel(path + ": " + std::to_string(got) + " bytes, shorter than a coded trunk's header");
  if (std::memcmp(h, kHeaderMagic, 8) != 0) throw BadModel(path + ": not a coded trunk (no K3TRUNKC header)");
  if (Get(h + 8, 4) != kCodedTrunkVersion)
    throw BadModel(path + ": coded trunk version " + std::to_string(Get(h + 8, 4)) + "; this k3 reads version " +
                   std::to_string(kCodedTrunkVersion));
  ExpertDigest id;
  std::memcpy(id.data(), h + 16, 32);
  if (id != t.pack_id)
    throw BadModel(path + ": pack id " + DigestHex(id).substr(0, 16) + "... is not the manifest's " +
                   DigestHex(t.pack_id).substr(0, 16) + "... (a coded trunk of other weights)");
  if (Get(h + 12, 4) != t.runs.size() || Get(h + 48, 8) != t.file_bytes)
    throw BadModel(path + ": its header says " + std::to_string(Get(h + 12, 4)) + " runs in " + std::to_string(Get(h + 48, 8)) +
                   " bytes, the manifest " + std::to_string(t.runs.size()) + " in " + std::to_string(t.file_bytes));
  for (size_t i = 56; i < kCodedHeaderBytes; ++i)
    if (h[i] != 0) throw BadModel(path + ": non-zero bytes in the reserved part of its header");
}

}  // namespace k3::codec
