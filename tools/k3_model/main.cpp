// k3-model: the model directory's tool (docs/k3-model.md).
//   k3-model digest DIR [--out PATH]   the expert manifest of a trusted copy
//   k3-model trunk-only SRC DST         a copy without the routed experts (sparse holes)
//   k3-model pack-trunk SRC DST         the coded trunk of SRC (lossless, smaller) in DST
//   k3-model check DIR [--digests] [--release SRC]  complete release, trunk-only copy or coded trunk
// Errors are one line; exit codes as docs/exit-codes.md.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <filesystem>

#include "common/cli_parse.h"
#include "common/error.h"
#include "common/manifest.h"
#include "common/model_config.h"
#include "common/process_init.h"
#include "common/run_main.h"
#include "common/safetensors.h"
#include "tools/k3_model/expert_digests.h"
#include "tools/k3_model/model_check.h"
#include "tools/k3_model/trunk_copy.h"
#include "tools/k3_model/trunk_pack.h"

namespace k3::model_tool {
namespace {

int Digest(const std::string& dir, std::string out, int threads) {
  if (out.empty()) out = DefaultManifestPath(dir);
  const std::string existing = DefaultManifestPath(dir);
  if (std::filesystem::exists(existing) && LoadManifest(existing).trunk_only)
    throw UsageError(dir + " is a trunk-only copy: its experts are holes; digest a complete release");
  const Checkpoint ck = Checkpoint::Open(dir);
  const ModelConfig cfg = LoadModelConfig(dir + "/config.json");
  Manifest m = MakeManifest(ck, cfg, DigestExperts(ck, cfg, threads, "digest " + dir), false);
  WriteManifest(m, out);
  std::printf("%s: SHA-256 of %zu routed experts in %zu shards\n", out.c_str(), m.digests.size(), m.shards.size());
  return kExitOk;
}

int Main(int argc, char** argv) {
  CLI::App app{"k3-model: expert manifests, trunk-only copies, coded trunks and checks of a K3 model directory"};
  app.require_subcommand(1);
  int threads = DefaultThreads();
  app.add_option("--threads", threads, "hashing (and coding) threads (default: the online cores)")->check(CLI::Range(1, 256));

  std::string dir, out, src, dst, release;
  bool with_digests = false;
  auto* digest = app.add_subcommand("digest", "write the expert manifest (SHA-256 of every routed expert) of a trusted copy");
  digest->add_option("DIR", dir, "model directory")->required();
  digest->add_option("--out", out, "manifest path (default: DIR/k3-manifest.json)");
  auto* trunk = app.add_subcommand("trunk-only", "copy SRC to DST without the routed experts (sparse holes)");
  trunk->add_option("SRC", src, "complete model directory")->required();
  trunk->add_option("DST", dst, "new directory (absent or empty)")->required();
  auto* pack = app.add_subcommand("pack-trunk", "write the coded trunk of SRC (lossless, about 0.7x) into DST, with a manifest of digests");
  pack->add_option("SRC", src, "model directory")->required();
  pack->add_option("DST", dst, "new directory (absent or empty)")->required();
  auto* check = app.add_subcommand("check", "is DIR a complete release, a trunk-only copy or a coded trunk; what budget suits this machine");
  check->add_option("DIR", dir, "model directory")->required();
  check->add_flag("--digests", with_digests, "also hash every routed expert and compare it with the manifest");
  check->add_option("--release", release, "with a coded trunk DIR: also check that it is this model directory's trunk");
  if (!ParseCommandLine(app, argc, argv, "k3-model")) return kExitOk;
  if (*digest) return Digest(dir, out, threads);
  if (*trunk) {
    const uint64_t written = WriteTrunkOnlyCopy(src, dst, threads);
    std::printf("%s: trunk-only copy of %s, %.1f MB of shard bytes written, manifest %s\n", dst.c_str(), src.c_str(),
                static_cast<double>(written) / 1e6, DefaultManifestPath(dst).c_str());
    return kExitOk;
  }
  if (*pack) {
    const PackSummary s = PackTrunk(src, dst, threads);
    std::printf("%s: coded trunk of %s, %llu runs, %.1f MB coded for %.1f MB of trunk (%.4fx), %.1f s\n", dst.c_str(),
                src.c_str(), static_cast<unsigned long long>(s.runs), s.coded_bytes / 1e6, s.source_bytes / 1e6,
                static_cast<double>(s.coded_bytes) / static_cast<double>(s.source_bytes), s.seconds);
    return kExitOk;
  }
  if (IsCodedTrunkDir(dir)) {
    if (with_digests) throw UsageError("--digests: " + dir + " is a coded trunk; its check always compares every digest");
    return CheckCodedTrunk(dir, release, threads);
  }
  if (!release.empty()) throw UsageError("--release: " + dir + " is not a coded trunk (no k3-coded-trunk.json)");
  return CheckModel(dir, with_digests, threads);
}

}  // namespace
}  // namespace k3::model_tool

int main(int argc, char** argv) {
  k3::InitProcess();  // whole stderr lines, harmless signals (common/process_init.h)
  return k3::RunMain("k3-model", [&] { return k3::model_tool::Main(argc, argv); });
}
