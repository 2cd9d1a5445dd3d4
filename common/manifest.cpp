#include "common/manifest.h"

#include <openssl/evp.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "common/error.h"
#include "common/user_file.h"
#include "common/json_strict.h"

namespace k3 {

ExpertDigest DigestBytes(const uint8_t* data, size_t length) {
  ExpertDigest d{};
  unsigned int n = 0;
  if (EVP_Digest(data, length, d.data(), &n, EVP_sha256(), nullptr) != 1 || n != d.size())
    throw RuntimeFailure("SHA-256 (OpenSSL EVP_Digest) failed");
  return d;
}

size_t DigestChunks(uint64_t length) { return static_cast<size_t>((length + kDigestChunkBytes - 1) / kDigestChunkBytes); }

ExpertDigest CombineChunkDigests(const std::vector<ExpertDigest>& chunks) {
  std::vector<uint8_t> all;
  for (const ExpertDigest& c : chunks) all.insert(all.end(), c.begin(), c.end());
  return DigestBytes(all.data(), all.size());
}

ExpertDigest ExpertDigestOf(const uint8_t* data, uint64_t length) {
  std::vector<ExpertDigest> chunks;
  for (uint64_t at = 0; at < length; at += kDigestChunkBytes)
    chunks.push_back(DigestBytes(data + at, static_cast<size_t>(std::min(kDigestChunkBytes, length - at))));
  return CombineChunkDigests(chunks);
}

std::string DigestHex(const ExpertDigest& d) {
  static const char* kHex = "0123456789abcdef";
  std::string s(2 * d.size(), '0');
  for (size_t i = 0; i < d.size(); ++i) {
    s[2 * i] = kHex[d[i] >> 4];
    s[2 * i + 1] = kHex[d[i] & 15];
  }
  return s;
}

const ExpertDigest& Manifest::at(int64_t layer, int64_t expert) const {
  if (!has(layer, expert))
    throw RuntimeFailure("the manifest has no layer " + std::to_string(layer) + " expert " + std::to_string(expert));
  return digests.at(static_cast<size_t>((layer - first_layer) * num_experts + expert));
}

std::string DefaultManifestPath(const std::string& model_dir) {
  return (std::filesystem::path(model_dir) / kManifestFile).string();
}

namespace {

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;  // upper case is not written, so it is not accepted either
}

}  // namespace

Manifest LoadManifest(const std::string& path) {
  const nlohmann::json j =
      ParseJsonStrict(ReadUserFile(path, kMaxModelJsonBytes, "expert manifest", kExitBadModel), path + " (expert manifest)");
  auto bad = [&](const std::string& why) { return BadModel(path + ": expert manifest " + why); };
  if (!j.is_object()) throw bad("is not a JSON object");
  static const std::set<std::string> kKeys = {"format",     "version",    "hash",        "chunk_bytes", "trunk_only",
                                              "first_layer", "num_layers", "num_experts", "shards",      "experts"};
  for (auto it = j.begin(); it != j.end(); ++it)
    if (!kKeys.count(it.key())) throw bad("has an unknown key '" + Printable(it.key()) + "'");
  for (const char* k : {"format", "version", "hash", "chunk_bytes", "trunk_only", "first_layer", "num_layers",
                        "num_experts", "shards", "experts"})
    if (!j.contains(k)) throw bad("lacks '" + std::string(k) + "' (truncated or not a manifest?)");
  if (!j["format"].is_string() || j["format"].get<std::string>() != kManifestFormat)
    throw bad("'format' is not \"" + std::string(kManifestFormat) + "\"");
  if (!j["version"].is_number_integer() || j["version"].get<int64_t>() != kManifestVersion)
    throw bad("has version " + j["version"].dump() + "; this k3 reads version " + std::to_string(kManifestVersion));
  if (!j["hash"].is_string() || j["hash"].get<std::string>() != kManifestHash)
    throw bad("'hash' is not \"" + std::string(kManifestHash) + "\"");
  if (!j["chunk_bytes"].is_number_unsigned() || j["chunk_bytes"].get<uint64_t>() != kDigestChunkBytes)
    throw bad("'chunk_bytes' is not " + std::to_string(kDigestChunkBytes));
  if (!j["trunk_only"].is_boolean()) throw bad("'trunk_only' is not true or false");
  Manifest m;
  m.trunk_only = j["trunk_only"].get<bool>();
  auto count = [&](const char* k, int64_t limit) {
    if (!j[k].is_number_integer() || j[k].get<int64_t>() < 0 || j[k].get<int64_t>() > limit)
      throw bad("'" + std::string(k) + "' is not an integer in [0, " + std::to_string(limit) + "]");
    return j[k].get<int64_t>();
  };
  m.num_layers = count("num_layers", 1 << 16);
  m.first_layer = count("first_layer", m.num_layers);
  m.num_experts = count("num_experts", 1 << 20);
  if (!j["shards"].is_array() || j["shards"].empty()) throw bad("'shards' is not a non-empty list");
  for (const auto& s : j["shards"]) {
    if (!s.is_object() || s.size() != 2 || !s.contains("file") || !s.contains("bytes") || !s["file"].is_string() ||
        !s["bytes"].is_number_unsigned())
      throw bad("has a shard that is not {\"file\": NAME, \"bytes\": SIZE}");
    const std::string file = s["file"].get<std::string>();
    if (file.empty() || file.find('/') != std::string::npos || file == "." || file == "..")
      throw bad("names shard '" + Printable(file) + "', not a file name");
    m.shards.push_back({file, s["bytes"].get<uint64_t>()});
  }
  const auto& ex = j["experts"];
  const int64_t want = (m.num_layers - m.first_layer) * m.num_experts;
  if (!ex.is_array() || static_cast<int64_t>(ex.size()) != want)
    throw bad("holds " + std::to_string(ex.is_array() ? ex.size() : 0) + " expert digests, expected " +
              std::to_string(want) + " (" + std::to_string(m.num_layers - m.first_layer) + " MoE layers x " +
              std::to_string(m.num_experts) + " experts)");
  m.digests.resize(static_cast<size_t>(want));
  for (size_t i = 0; i < m.digests.size(); ++i) {
    const std::string h = ex[i].is_string() ? ex[i].get<std::string>() : std::string();
    bool ok = h.size() == 64;
    for (size_t b = 0; ok && b < 32; ++b) {
      const int hi = HexValue(h[2 * b]), lo = HexValue(h[2 * b + 1]);
      ok = hi >= 0 && lo >= 0;
      if (ok) m.digests[i][b] = static_cast<uint8_t>(hi << 4 | lo);
    }
    if (!ok)
      throw bad("digest of layer " + std::to_string(m.first_layer + static_cast<int64_t>(i) / std::max<int64_t>(1, m.num_experts)) +
                " expert " + std::to_string(static_cast<int64_t>(i) % std::max<int64_t>(1, m.num_experts)) +
                " is not 64 lower-case hex digits");
  }
  return m;
}

std::string ManifestJson(const Manifest& m) {
  // Written by hand so each digest sits on its own line (diffable, greppable).
  std::string out = "{\n  \"format\": \"" + std::string(kManifestFormat) + "\",\n  \"version\": " +
                    std::to_string(kManifestVersion) + ",\n  \"hash\": \"" + kManifestHash + "\",\n  \"chunk_bytes\": " +
                    std::to_string(kDigestChunkBytes) + ",\n  \"trunk_only\": " +
                    (m.trunk_only ? "true" : "false") + ",\n  \"first_layer\": " + std::to_string(m.first_layer) +
                    ",\n  \"num_layers\": " + std::to_string(m.num_layers) + ",\n  \"num_experts\": " +
                    std::to_string(m.num_experts) + ",\n  \"shards\": [";
  for (size_t i = 0; i < m.shards.size(); ++i)
    out += std::string(i ? "," : "") + "\n    {\"file\": " + nlohmann::json(m.shards[i].file).dump() +
           ", \"bytes\": " + std::to_string(m.shards[i].bytes) + "}";
  out += "\n  ],\n  \"experts\": [";
  for (size_t i = 0; i < m.digests.size(); ++i) out += std::string(i ? "," : "") + "\n    \"" + DigestHex(m.digests[i]) + "\"";
  out += "\n  ]\n}\n";
  return out;
}

void WriteManifest(const Manifest& m, const std::string& path) {
  WriteFileAtomically(path, ManifestJson(m), "expert manifest", kExitOutput);
}

std::optional<Manifest> CheckExpertSource(const std::string& model_dir, const std::string& manifest_flag,
                                          const ModelConfig& cfg, bool remote, bool no_verify) {
  const std::string path = manifest_flag.empty() ? DefaultManifestPath(model_dir) : manifest_flag;
  if (manifest_flag.empty() && !std::filesystem::exists(path)) {
    if (remote && !no_verify)
      throw UsageError("experts from an expert server need a manifest to check them against: " + path +
                       " does not exist (write it with k3-model digest on a trusted copy, pass --manifest PATH, "
                       "or --no-verify)");
    return std::nullopt;
  }
  Manifest m = LoadManifest(path);
  CheckManifestFits(m, cfg, path);
  if (m.trunk_only && !remote)
    throw UsageError(model_dir + " is a trunk-only copy (k3-model trunk-only): its routed experts are not on this "
                     "disk; read them from an expert server with --expert-server tcp://HOST:PORT");
  return m;
}

void CheckManifestFits(const Manifest& m, const ModelConfig& cfg, const std::string& path) {
  if (m.first_layer != cfg.first_k_dense_replace || m.num_layers != cfg.num_layers || m.num_experts != cfg.num_experts)
    throw BadModel(path + ": expert manifest describes layers " + std::to_string(m.first_layer) + ".." +
                   std::to_string(m.num_layers - 1) + " x " + std::to_string(m.num_experts) +
                   " experts, the model has layers " + std::to_string(cfg.first_k_dense_replace) + ".." +
                   std::to_string(cfg.num_layers - 1) + " x " + std::to_string(cfg.num_experts));
}

}  // namespace k3
