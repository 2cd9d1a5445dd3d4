// The expert manifest (docs/formats.md "Expert manifest"): a digest of every routed expert's
// bytes (its six tensors in file order: ExpertRange, exactly what k3-expert-server sends),
// taken by `k3-model digest` from a trusted copy, plus the shard sizes and whether the
// directory is a trunk-only copy (routed experts left as holes). The fetcher checks every
// expert that arrives from an expert server against it (services/expert_fetcher/expert_verify.h).
//
// An expert's digest is SHA-256 over the SHA-256 of each 4 MiB chunk of its bytes, so one
// expert (17.5 MB in the release) is checked by several threads at once: the check adds a
// few milliseconds per expert, not 12 ms, to the time compute waits for it. SHA-256 comes from
// OpenSSL's libcrypto, which uses the CPU's SHA extensions: 1.42 GB/s per core here against
// 0.82 GB/s for libsodium's BLAKE2b and 0.22 GB/s for libsodium's SHA-256.
#pragma once
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/model_config.h"

namespace k3 {

inline constexpr const char* kManifestFile = "k3-manifest.json";  // inside the model directory
inline constexpr const char* kManifestFormat = "k3-expert-manifest";
inline constexpr int kManifestVersion = 1;
inline constexpr const char* kManifestHash = "sha256-chunks";  // see ExpertDigestOf

using ExpertDigest = std::array<uint8_t, 32>;  // SHA-256
inline constexpr uint64_t kDigestChunkBytes = uint64_t{4} << 20;

// Plain SHA-256 of `length` bytes.
ExpertDigest DigestBytes(const uint8_t* data, size_t length);
// Chunks of an expert of `length` bytes: chunk i is [i * kDigestChunkBytes, min(.., length)).
size_t DigestChunks(uint64_t length);
// SHA-256 of the chunk digests concatenated in order (SHA-256 of nothing for no chunks).
ExpertDigest CombineChunkDigests(const std::vector<ExpertDigest>& chunks);
// An expert's digest on one thread: CombineChunkDigests of DigestBytes of each chunk.
ExpertDigest ExpertDigestOf(const uint8_t* data, uint64_t length);
std::string DigestHex(const ExpertDigest& d);

struct ManifestShard {
  std::string file;  // file name inside the model directory
  uint64_t bytes = 0;
};

struct Manifest {
  bool trunk_only = false;       // routed experts are holes: they come from an expert server
  int64_t first_layer = 0;       // first MoE layer (config first_k_dense_replace)
  int64_t num_layers = 0;        // config num_hidden_layers
  int64_t num_experts = 0;       // routed experts per MoE layer
  std::vector<ManifestShard> shards;
  std::vector<ExpertDigest> digests;  // (layer - first_layer) * num_experts + expert

  bool has(int64_t layer, int64_t expert) const {
    return layer >= first_layer && layer < num_layers && expert >= 0 && expert < num_experts;
  }
  const ExpertDigest& at(int64_t layer, int64_t expert) const;
};

// `dir`/k3-manifest.json.
std::string DefaultManifestPath(const std::string& model_dir);
// Reads and validates a manifest; any defect (unreadable, truncated, not JSON, another format
// or version, a wrong digest count, a digest that is not 64 hex digits) is BadModel (exit 3)
// naming the file.
Manifest LoadManifest(const std::string& path);
// Serialises a manifest (the inverse of LoadManifest).
std::string ManifestJson(const Manifest& m);
// Writes through a temporary file and a rename, so a reader never sees half a manifest;
// Error(kExitOutput) when it cannot be written.
void WriteManifest(const Manifest& m, const std::string& path);
// BadModel unless the manifest describes this model's layers and experts.
void CheckManifestFits(const Manifest& m, const ModelConfig& cfg, const std::string& path);

// The rules of a run's expert source, in one place for k3-launch (before anything starts) and
// the fetcher (at start): the manifest is `manifest_flag`, else `model_dir`/k3-manifest.json
// when that exists. Reading experts locally (`remote` false) from a trunk-only copy is
// UsageError; remote without a manifest is UsageError unless `no_verify`; a bad manifest, or
// one for another model, is BadModel. Returns the manifest when there is one ({} if none).
std::optional<Manifest> CheckExpertSource(const std::string& model_dir, const std::string& manifest_flag,
                                          const ModelConfig& cfg, bool remote, bool no_verify);

}  // namespace k3
