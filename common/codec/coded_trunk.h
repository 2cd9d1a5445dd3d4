// The coded trunk (docs/formats.md, "Coded trunk"): a directory beside the release holding one
// data file of coded runs and a manifest that binds every run to the release's own bytes by
// digest. Written once by `k3-model pack-trunk`, verified by `k3-model check`.
//
// Data file: a 4096-byte header ("K3TRUNKC", u32 version, u32 runs, the 32-byte pack id, u64
// file bytes, zeros), then each coded run (coded_run.h) at a 4096-aligned offset, zero-padded to
// the next one, so every run is read with O_DIRECT in place.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "common/codec/coded_run.h"
#include "common/manifest.h"
#include "common/model_config.h"
#include "common/safetensors.h"

namespace k3::codec {

inline constexpr const char* kCodedTrunkManifestFile = "k3-coded-trunk.json";
inline constexpr const char* kCodedTrunkDataFile = "k3-coded-trunk.bin";
inline constexpr const char* kCodedTrunkFormat = "k3-coded-trunk";
inline constexpr const char* kCodedTrunkCodec = "bf16-hi3-esc4";  // frame_codec.h
inline constexpr int kCodedTrunkVersion = 1;
inline constexpr uint64_t kCodedHeaderBytes = 4096;
// A run's source bytes, at most: a layer (about 1.2 GB in the release) or the globals are cut
// into runs of this size at frame boundaries, so packing and checking hold a few runs in memory.
inline constexpr uint64_t kMaxRunSourceBytes = 64ull << 20;

// One coded run: which source bytes it codes and where it sits in the data file.
struct CodedRun {
  int64_t layer = 0;  // the layer whose trunk it belongs to; num_layers for the globals
  int shard = 0;      // index into the manifest's shards
  uint64_t begin = 0, end = 0;       // source bytes in that shard
  ExpertDigest digest{};             // of the source bytes: ExpertDigestOf (common/manifest.h)
  uint64_t coded_offset = 0;         // in the data file, a multiple of 4096
  uint64_t coded_bytes = 0;          // the coded run, without its padding
  ExpertDigest coded_digest{};       // of the coded bytes, the same way
  std::vector<Bf16Span> spans;       // while packing: the bf16 tensors, from `begin` (not stored)
};

struct CodedTrunk {
  int64_t num_layers = 0;
  std::vector<ManifestShard> shards;  // the release's shards as packed (names, sizes)
  uint64_t file_bytes = 0;            // the data file's size
  ExpertDigest pack_id{};             // PackId(runs)
  std::vector<CodedRun> runs;         // in file order: layers ascending, then the globals
};

// Every trunk byte of the checkpoint as runs: each layer's trunk run and the globals run
// (common/tensor_names.h), cut at frame boundaries into runs of at most kMaxRunSourceBytes. BF16
// tensors become spans; everything else in a run (F32 tensors, gaps) is coded raw.
std::vector<CodedRun> PlanCodedRuns(const Checkpoint& ck, const ModelConfig& cfg);

// The cut of one run [begin, end) with its spans (relative to begin) into pieces of at most
// `max_bytes` source bytes at frame boundaries (PlanFramePieces); spans are clipped to each.
std::vector<CodedRun> CutRun(const CodedRun& whole, uint64_t max_bytes);

// SHA-256 of the runs' source digests in order: the same release packs to the same id.
ExpertDigest PackId(const std::vector<CodedRun>& runs);

std::string CodedTrunkJson(const CodedTrunk& t);
// BadModel (exit 3) naming the file for anything that is not a version-1 coded trunk manifest.
CodedTrunk LoadCodedTrunk(const std::string& manifest_path);

std::array<uint8_t, kCodedHeaderBytes> CodedHeader(const CodedTrunk& t);
// BadModel naming `path` unless `h` (the data file's first 4096 bytes; `got` of them were read)
// is the header this manifest implies: not a coded trunk, another version, another pack
// (a data file of other weights), another run count, another size.
void CheckCodedHeader(const uint8_t* h, uint64_t got, const CodedTrunk& t, const std::string& path);

// BadModel unless `t` was packed from this checkpoint's layout: the same shard names and sizes,
// and the runs PlanCodedRuns gives (layer, shard, begin, end). Cheap: headers and sizes only;
// that the bytes are the same is what the digests show.
void CheckCodedTrunkFits(const CodedTrunk& t, const Checkpoint& ck, const ModelConfig& cfg, const std::string& what);

// "layer 3" or "the globals", for messages.
std::string RunOwner(const CodedTrunk& t, const CodedRun& r);

}  // namespace k3::codec
