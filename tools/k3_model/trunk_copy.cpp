#include "tools/k3_model/trunk_copy.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <set>
#include <vector>

#include "common/error.h"
#include "common/manifest.h"
#include "common/model_config.h"
#include "common/safetensors.h"
#include "common/tensor_names.h"
#include "tools/k3_model/expert_digests.h"

namespace k3::model_tool {

namespace fs = std::filesystem;

namespace {

struct Span {
  uint64_t begin = 0, end = 0;
};

// Copies `keep` ranges of `src` into a new `dst` of the same size; the rest stays a hole.
uint64_t CopyRanges(const std::string& src, const std::string& dst, uint64_t size, const std::vector<Span>& keep) {
  const int in = open(src.c_str(), O_RDONLY | O_CLOEXEC);
  if (in < 0) throw RuntimeFailure(src + ": " + std::strerror(errno));
  const int out = open(dst.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (out < 0) {
    close(in);
    throw RuntimeFailure(dst + ": " + std::strerror(errno));
  }
  std::string error;
  uint64_t written = 0;
  if (ftruncate(out, static_cast<off_t>(size)) != 0) error = dst + ": " + std::strerror(errno);
  std::vector<uint8_t> buf(8u << 20);
  for (const Span& s : keep) {
    for (uint64_t off = s.begin; error.empty() && off < s.end;) {
      const size_t want = static_cast<size_t>(std::min<uint64_t>(buf.size(), s.end - off));
      const ssize_t n = pread(in, buf.data(), want, static_cast<off_t>(off));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        error = src + ": read failed at byte " + std::to_string(off) + (n < 0 ? std::string(": ") + std::strerror(errno) : "");
        break;
      }
      for (ssize_t done = 0; error.empty() && done < n;) {
        const ssize_t w = pwrite(out, buf.data() + done, static_cast<size_t>(n - done), static_cast<off_t>(off) + done);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) error = dst + ": write failed: " + std::strerror(errno);
        else done += w;
      }
      off += static_cast<uint64_t>(n);
      written += static_cast<uint64_t>(n);
    }
  }
  if (error.empty() && fsync(out) != 0) error = dst + ": " + std::strerror(errno);
  close(in);
  if (close(out) != 0 && error.empty()) error = dst + ": " + std::strerror(errno);
  if (!error.empty()) throw RuntimeFailure(error);
  return written;
}

}  // namespace

uint64_t WriteTrunkOnlyCopy(const std::string& src, const std::string& dst, int threads) {
  std::error_code ec;
  if (fs::exists(dst, ec) && !(fs::is_directory(dst, ec) && fs::is_empty(dst, ec)))
    throw UsageError(dst + " exists and is not an empty directory");
  if (fs::equivalent(src, dst, ec)) throw UsageError("SRC and DST are the same directory");
  const Checkpoint ck = Checkpoint::Open(src);
  const ModelConfig cfg = LoadModelConfig(src + "/config.json");
  const std::string src_manifest = DefaultManifestPath(src);

  // The digests: the source's manifest when it has one (it is the trusted copy), else read now.
  std::vector<ExpertDigest> digests;
  if (fs::exists(src_manifest)) {
    Manifest m = LoadManifest(src_manifest);
    CheckManifestFits(m, cfg, src_manifest);
    if (m.trunk_only) throw UsageError(src + " is itself a trunk-only copy: copy from a complete release");
    const Manifest now = MakeManifest(ck, cfg, {}, false);
    for (size_t i = 0; i < now.shards.size(); ++i)
      if (m.shards.size() != now.shards.size() || m.shards[i].file != now.shards[i].file ||
          m.shards[i].bytes != now.shards[i].bytes)
        throw BadModel(src_manifest + ": its shard list does not match the shards of " + src + " (run k3-model check)");
    digests = std::move(m.digests);
  } else {
    digests = DigestExperts(ck, cfg, threads, "digest " + src);
  }

  // Each shard's expert ranges, merged; what is kept is the complement.
  std::vector<std::vector<Span>> experts(ck.shard_paths().size());
  for (int64_t l = cfg.first_k_dense_replace; l < cfg.num_layers; ++l)
    for (int64_t e = 0; e < cfg.num_experts; ++e) {
      const ByteRange r = ExpertRange(ck, static_cast<int>(l), static_cast<int>(e));
      experts[static_cast<size_t>(r.shard)].push_back({static_cast<uint64_t>(r.begin), static_cast<uint64_t>(r.end)});
    }

  fs::create_directories(dst, ec);
  if (ec) throw RuntimeFailure(dst + ": " + ec.message());
  std::set<std::string> shard_names;
  for (const auto& p : ck.shard_paths()) shard_names.insert(fs::path(p).filename().string());
  // Everything else (config, index, tokenizer files, ...) is copied as it is.
  for (const auto& entry : fs::directory_iterator(src)) {
    const std::string name = entry.path().filename().string();
    if (shard_names.count(name) || name == kManifestFile) continue;
    fs::copy(entry.path(), fs::path(dst) / name, fs::copy_options::recursive | fs::copy_options::copy_symlinks, ec);
    if (ec) throw RuntimeFailure((fs::path(dst) / name).string() + ": " + ec.message());
  }
  uint64_t written = 0;
  for (size_t i = 0; i < ck.shard_paths().size(); ++i) {
    const std::string& path = ck.shard_paths()[i];
    struct stat st{};
    if (stat(path.c_str(), &st) != 0) throw RuntimeFailure(path + ": " + std::strerror(errno));
    const auto size = static_cast<uint64_t>(st.st_size);
    std::vector<Span>& holes = experts[i];
    std::sort(holes.begin(), holes.end(), [](Span a, Span b) { return a.begin < b.begin; });
    std::vector<Span> keep;
    uint64_t at = 0;
    for (const Span& h : holes) {
      if (h.begin > at) keep.push_back({at, h.begin});
      at = std::max(at, h.end);
    }
    if (at < size) keep.push_back({at, size});
    const std::string out = (fs::path(dst) / fs::path(path).filename()).string();
    const uint64_t w = CopyRanges(path, out, size, keep);
    written += w;
    std::fprintf(stderr, "[k3-model] trunk-only: %s (%zu of %zu): %.1f MB of %.1f MB written, the rest are expert holes\n",
                 fs::path(path).filename().c_str(), i + 1, ck.shard_paths().size(), static_cast<double>(w) / 1e6,
                 static_cast<double>(size) / 1e6);
  }
  WriteManifest(MakeManifest(ck, cfg, std::move(digests), true), DefaultManifestPath(dst));
  return written;
}

}  // namespace k3::model_tool
