#include "common/state_file.h"

#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>

#include "common/error.h"
#include "common/user_file.h"

namespace k3::state {
namespace {

static_assert(std::endian::native == std::endian::little, "state files are little-endian");

// Header field offsets (docs/formats.md "State file").
constexpr size_t kOffVersion = 8, kOffExpertInputs = 12, kOffConfigHash = 16, kOffLayoutHash = 24,
                 kOffLayers = 32, kOffPosition = 40, kOffIds = 48, kOffBodyFloats = 56, kOffExtra = 64,
                 kOffContext = 72;

template <typename T>
void Put(unsigned char* h, size_t off, T v) {
  std::memcpy(h + off, &v, sizeof v);
}
template <typename T>
T Get(const unsigned char* h, size_t off) {
  T v;
  std::memcpy(&v, h + off, sizeof v);
  return v;
}

struct Hasher {
  std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> s{XXH3_createState(), &XXH3_freeState};
  Hasher() {
    if (!s) throw RuntimeFailure("out of memory (XXH3 state)");
    XXH3_64bits_reset(s.get());
  }
  void Add(const void* p, size_t n) { XXH3_64bits_update(s.get(), p, n); }
  uint64_t Digest() const { return XXH3_64bits_digest(s.get()); }
};

std::string ReadAll(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw BadModel(path + ": cannot read");
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string Hex(uint64_t v) {
  char b[17];
  std::snprintf(b, sizeof b, "%016llx", static_cast<unsigned long long>(v));
  return b;
}

}  // namespace

ModelIdentity IdentifyModel(const std::string& model_dir, const Checkpoint& ck) {
  ModelIdentity id;
  const std::string cfg = ReadAll(model_dir + "/config.json");
  id.config_hash = XXH3_64bits(cfg.data(), cfg.size());
  Hasher h;
  for (const auto& [name, t] : ck.all()) {
    std::string line = name;
    line += '\0';
    line += DTypeName(t.dtype);
    line += '\0';
    for (size_t i = 0; i < t.shape.size(); ++i) {
      if (i) line += ',';
      line += std::to_string(t.shape[i]);
    }
    line += '\n';
    h.Add(line.data(), line.size());
  }
  // A sample of the values: two checkpoints of the same geometry (other seeds) differ here.
  for (const std::string& shard : ck.shard_paths()) {
    const SafetensorsFile f = SafetensorsFile::Open(shard);
    const int64_t n = std::min<int64_t>(4096, f.file_size() - f.data_start());
    std::string buf(static_cast<size_t>(std::max<int64_t>(n, 0)), '\0');
    std::ifstream in(shard, std::ios::binary);
    in.seekg(f.data_start());
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    if (!in) throw BadModel(shard + ": cannot read its first data bytes");
    h.Add(buf.data(), buf.size());
  }
  id.layout_hash = h.Digest();
  return id;
}

ModelIdentity IdentifyModel(const std::string& model_dir) {
  return IdentifyModel(model_dir, Checkpoint::Open(model_dir));
}

uint64_t BodyFloats(const ModelConfig& cfg, int64_t position) {
  const uint64_t P = static_cast<uint64_t>(cfg.kda_proj());
  const uint64_t D = static_cast<uint64_t>(cfg.kda_head_dim);
  const uint64_t W = static_cast<uint64_t>(cfg.conv_kernel > 0 ? cfg.conv_kernel - 1 : 0);
  const uint64_t n = static_cast<uint64_t>(position);
  uint64_t total = 0;
  for (int64_t l = 0; l < cfg.num_layers; ++l) {
    if (cfg.layer_kind[static_cast<size_t>(l)] == MixerKind::KDA)
      total += static_cast<uint64_t>(cfg.kda_heads) * D * D + 3 * P * W;
    else
      total += n * static_cast<uint64_t>(cfg.kv_lora_rank + cfg.qk_rope_head_dim);
  }
  return total;
}

StateInfo ReadStateFile(const std::string& path, const Expect& want, const SectionsFor& sections) {
  auto bad = [&](const std::string& why) { return BadInput("state file " + path + ": " + why); };
  // A FIFO or device is refused before it is read (it could block or never end).
  if (struct stat st {}; ::stat(path.c_str(), &st) != 0) throw bad(std::string("cannot read (") + std::strerror(errno) + ")");
  CheckUserFile(path, UINT64_MAX, "state file", kExitBadInput);
  std::ifstream f(path, std::ios::binary);
  if (!f) throw bad(std::string("cannot read (") + std::strerror(errno) + ")");
  f.seekg(0, std::ios::end);
  const int64_t size = static_cast<int64_t>(f.tellg());
  f.seekg(0);
  unsigned char h[kHeaderBytes];
  if (size < kHeaderBytes + 8 || !f.read(reinterpret_cast<char*>(h), kHeaderBytes))
    throw bad("truncated (" + std::to_string(size) + " bytes, shorter than a header)");
  if (std::memcmp(h, kMagic, sizeof kMagic) != 0) throw bad("not a k3 state file (bad magic)");
  const uint32_t version = Get<uint32_t>(h, kOffVersion);
  if (version != kVersion)
    throw bad("format version " + std::to_string(version) + ", this k3 reads version " + std::to_string(kVersion));
  const int64_t n_ids = Get<int64_t>(h, kOffIds), position = Get<int64_t>(h, kOffPosition);
  const uint64_t floats = Get<uint64_t>(h, kOffBodyFloats), extra = Get<uint64_t>(h, kOffExtra);
  // Sizes first (bounded by the file's size, so no arithmetic below can overflow), then the checksum.
  const uint64_t limit = static_cast<uint64_t>(size);
  if (n_ids < 0 || static_cast<uint64_t>(n_ids) > limit / 4 || floats > limit / 4 || extra > limit)
    throw bad("header sizes exceed the file (" + std::to_string(size) + " bytes): truncated or corrupt");
  const uint64_t expect =
      static_cast<uint64_t>(kHeaderBytes) + 4 * static_cast<uint64_t>(n_ids) + 4 * floats + extra + 8;
  if (expect != limit)
    throw bad(std::string(limit < expect ? "truncated" : "has trailing bytes") + " (" + std::to_string(size) +
              " bytes, the header says " + std::to_string(expect) + ")");

  Hasher hs;
  hs.Add(h, kHeaderBytes);
  StateInfo info;
  info.ids.resize(static_cast<size_t>(n_ids));
  if (!f.read(reinterpret_cast<char*>(info.ids.data()), n_ids * 4)) throw bad("read failed");
  hs.Add(info.ids.data(), info.ids.size() * 4);
  // The sections (or one scratch buffer) in file order; sizes checked against the model below,
  // after the checksum, so a corrupt header reads as corrupt.
  std::vector<std::span<float>> dst;
  std::vector<float> scratch;
  uint64_t dst_floats = 0;
  if (sections && floats == BodyFloats(*want.cfg, position) && position >= 0) dst = sections(position);
  for (const auto& s : dst) dst_floats += s.size();
  if (dst_floats != floats) {
    scratch.resize(std::min<uint64_t>(floats, uint64_t{1} << 18));
    dst.clear();
    for (uint64_t left = floats; left > 0; left -= std::min<uint64_t>(left, scratch.size()))
      dst.emplace_back(scratch.data(), std::min<uint64_t>(left, scratch.size()));
  }
  // Every float of a state the engine wrote is finite; a NaN or infinity (with a recomputed
  // checksum) would run on as garbage ids, so it is refused.
  bool finite = true;
  for (const auto& s : dst) {
    char* p = reinterpret_cast<char*>(s.data());
    for (uint64_t done = 0, total = s.size() * 4; done < total;) {
      const uint64_t n = std::min<uint64_t>(total - done, uint64_t{1} << 20);
      if (!f.read(p + done, static_cast<std::streamsize>(n))) throw bad("read failed");
      hs.Add(p + done, n);
      done += n;
    }
    for (const float v : s) finite = finite && std::isfinite(v);
  }
  info.extra.resize(extra);
  if (!f.read(info.extra.data(), static_cast<std::streamsize>(extra))) throw bad("read failed");
  hs.Add(info.extra.data(), extra);
  uint64_t stored = 0;
  if (!f.read(reinterpret_cast<char*>(&stored), 8)) throw bad("read failed");
  if (stored != hs.Digest()) throw bad("checksum mismatch: the file is corrupt");
  if (!finite) throw bad("holds a value that is not finite (NaN or infinity): corrupt");

  info.model.config_hash = Get<uint64_t>(h, kOffConfigHash);
  info.model.layout_hash = Get<uint64_t>(h, kOffLayoutHash);
  info.expert_inputs_bf16 = Get<uint32_t>(h, kOffExpertInputs) != 0;
  info.position = position;
  if (info.model.config_hash != want.model.config_hash)
    throw bad("from another model (its config.json hash " + Hex(info.model.config_hash) + ", this model's " +
              Hex(want.model.config_hash) + ")");
  if (info.model.layout_hash != want.model.layout_hash)
    throw bad("from another model (its weight layout hash " + Hex(info.model.layout_hash) + ", this model's " +
              Hex(want.model.layout_hash) + ")");
  const ModelConfig& cfg = *want.cfg;
  if (Get<int64_t>(h, kOffLayers) != cfg.num_layers || position < 0 || position > n_ids ||
      Get<int64_t>(h, kOffContext) != n_ids || floats != BodyFloats(cfg, position))
    throw bad("inconsistent header (layers, position, ids or section sizes)");
  if (info.expert_inputs_bf16 != want.expert_inputs_bf16)
    throw bad(std::string("saved with expert_inputs ") + (info.expert_inputs_bf16 ? "bf16" : "f32") +
              ", this run uses " + (want.expert_inputs_bf16 ? "bf16" : "f32") + " (continuing would not be exact)");
  if (want.context > 0 && n_ids > want.context)
    throw bad("needs a context of " + std::to_string(n_ids) + " positions, the plan has " +
              std::to_string(want.context));
  for (int32_t id : info.ids)
    if (id < 0 || id >= cfg.vocab_size)
      throw bad("id " + std::to_string(id) + " outside the vocabulary [0," + std::to_string(cfg.vocab_size) + ")");
  return info;
}

void WriteStateFile(const std::string& path, const ModelConfig& cfg, const StateInfo& info,
                    const std::vector<std::span<const float>>& body) {
  uint64_t floats = 0;
  for (const auto& s : body) floats += s.size();
  if (floats != BodyFloats(cfg, info.position) || info.position > static_cast<int64_t>(info.ids.size()))
    throw RuntimeFailure("internal: state sections of " + std::to_string(floats) + " floats, expected " +
                         std::to_string(BodyFloats(cfg, info.position)));
  unsigned char h[kHeaderBytes] = {};
  std::memcpy(h, kMagic, sizeof kMagic);
  Put<uint32_t>(h, kOffVersion, kVersion);
  Put<uint32_t>(h, kOffExpertInputs, info.expert_inputs_bf16 ? 1 : 0);
  Put<uint64_t>(h, kOffConfigHash, info.model.config_hash);
  Put<uint64_t>(h, kOffLayoutHash, info.model.layout_hash);
  Put<int64_t>(h, kOffLayers, cfg.num_layers);
  Put<int64_t>(h, kOffPosition, info.position);
  Put<int64_t>(h, kOffIds, static_cast<int64_t>(info.ids.size()));
  Put<uint64_t>(h, kOffBodyFloats, floats);
  Put<uint64_t>(h, kOffExtra, info.extra.size());
  Put<int64_t>(h, kOffContext, static_cast<int64_t>(info.ids.size()));

  AtomicFile out(path, "state file", kExitOutput);
  Hasher hs;
  auto put = [&](const void* p, size_t n) {
    if (n == 0) return;
    hs.Add(p, n);
    out.Write(p, n);
  };
  put(h, kHeaderBytes);
  put(info.ids.data(), info.ids.size() * 4);
  for (const auto& s : body) put(s.data(), s.size() * 4);
  put(info.extra.data(), info.extra.size());
  const uint64_t sum = hs.Digest();
  out.Write(&sum, 8);
  out.Commit();
}

}  // namespace k3::state
