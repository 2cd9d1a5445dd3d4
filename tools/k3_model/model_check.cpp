#include "tools/k3_model/model_check.h"

#include <sys/stat.h>
#include <sys/statvfs.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/error.h"
#include "common/manifest.h"
#include "common/plan/memory_plan.h"
#include "common/safetensors.h"
#include "launcher/disk_probe.h"
#include "launcher/model_layout.h"
#include "launcher/plan_report.h"
#include "tools/k3_model/expert_digests.h"

namespace k3::model_tool {

namespace fs = std::filesystem;

namespace {

// kB fields of /proc/meminfo in bytes (-1 when absent).
int64_t MemInfo(const std::string& key) {
  std::ifstream in("/proc/meminfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key + ":", 0) != 0) continue;
    std::istringstream s(line.substr(key.size() + 1));
    int64_t kb = -1;
    s >> kb;
    return kb < 0 ? -1 : kb * 1024;
  }
  return -1;
}

// A budget flag value rounded down to 0.1 GiB (MiB below 1 GiB), as k3-launch --budget reads it.
std::string BudgetText(int64_t bytes) {
  char b[64];
  if (bytes >= (int64_t{1} << 30))
    std::snprintf(b, sizeof b, "%.1fG", std::floor(static_cast<double>(bytes) / (1 << 30) * 10) / 10);
  else
    std::snprintf(b, sizeof b, "%lldM", static_cast<long long>(bytes >> 20));
  return b;
}

// The smallest budget whose plan gives every routed expert a slot.
int64_t EverythingResident(const plan::PlanModel& pm, const plan::PlanOptions& po, int64_t floor) {
  const int64_t want = pm.cfg.routed_expert_count();
  auto fits = [&](int64_t b) { return plan::MakePlan(pm, b, po).expert_slots >= want; };
  int64_t lo = floor, hi = floor;
  while (!fits(hi)) {
    lo = hi;
    hi *= 2;
  }
  while (hi - lo > (1 << 20)) {
    const int64_t mid = lo + (hi - lo) / 2;
    (fits(mid) ? hi : lo) = mid;
  }
  return hi;
}

}  // namespace

int CheckModel(const std::string& dir, bool digests, int threads) {
  // Index, every header and every tensor the config implies (BadModel on the first defect).
  const launch::ModelLayout layout = launch::LoadModelLayout(dir, false);
  const Checkpoint ck = Checkpoint::Open(dir);
  const ModelConfig& cfg = layout.cfg;
  const Manifest now = MakeManifest(ck, cfg, {}, false);
  uint64_t apparent = 0, allocated = 0;
  for (const std::string& p : ck.shard_paths()) {
    struct stat st{};
    if (stat(p.c_str(), &st) != 0) throw RuntimeFailure(p + ": cannot stat");
    apparent += static_cast<uint64_t>(st.st_size);
    allocated += static_cast<uint64_t>(st.st_blocks) * 512;
  }
  std::printf("model: %s\n", dir.c_str());
  std::printf("shards: %zu, %.1f MB (%.1f MB on disk); index, headers and all %lld tensors valid\n",
              ck.shard_paths().size(), static_cast<double>(apparent) / 1e6, static_cast<double>(allocated) / 1e6,
              static_cast<long long>(layout.num_tensors));

  const std::string mpath = DefaultManifestPath(dir);
  std::optional<Manifest> m;
  if (fs::exists(mpath)) {
    m = LoadManifest(mpath);
    CheckManifestFits(*m, cfg, mpath);
    if (m->shards.size() != now.shards.size())
      throw BadModel(dir + ": " + std::to_string(now.shards.size()) + " shards, the manifest lists " +
                     std::to_string(m->shards.size()));
    for (size_t i = 0; i < now.shards.size(); ++i)
      if (m->shards[i].file != now.shards[i].file || m->shards[i].bytes != now.shards[i].bytes)
        throw BadModel(dir + ": shard " + now.shards[i].file + " is " + std::to_string(now.shards[i].bytes) +
                       " bytes, the manifest lists " + m->shards[i].file + " with " +
                       std::to_string(m->shards[i].bytes) + " (incomplete or altered copy)");
  }
  const bool trunk_only = m && m->trunk_only;
  if (trunk_only)
    std::printf("kind: trunk-only copy (k3-model trunk-only): routed experts are holes; run with "
                "--expert-server tcp://HOST:PORT\n");
  else
    std::printf("kind: complete release (%lld routed experts on disk)\n",
                static_cast<long long>(cfg.routed_expert_count()));
  if (m)
    std::printf("manifest: %s (version %d, SHA-256 of %zu experts, shard sizes match)\n", mpath.c_str(),
                kManifestVersion, m->digests.size());
  else
    std::printf("manifest: none (k3-model digest %s writes one; an expert server's bytes cannot be checked "
                "without it)\n", dir.c_str());

  if (digests) {
    if (!m) throw UsageError("--digests: " + mpath + " does not exist: nothing to check the experts against");
    if (trunk_only) {
      std::printf("digests: not checked: a trunk-only copy holds no expert bytes (the fetcher checks each one "
                  "from the server)\n");
    } else {
      const std::vector<ExpertDigest> got = DigestExperts(ck, cfg, threads, "check " + dir);
      for (size_t i = 0; i < got.size(); ++i)
        if (got[i] != m->digests[i])
          throw BadModel(dir + ": layer " + std::to_string(m->first_layer + static_cast<int64_t>(i) / m->num_experts) +
                         " expert " + std::to_string(static_cast<int64_t>(i) % m->num_experts) +
                         " does not match its digest in " + mpath);
      std::printf("digests: all %zu experts match the manifest\n", got.size());
    }
  }

  // The memory plan at its defaults (context 4096; a trunk-only copy adds the remote frames).
  plan::PlanOptions po;
  if (trunk_only) po.remote_expert_frames = 4;
  const int64_t floor = plan::PlanFloor(layout.plan_model, po);
  const int64_t resident = EverythingResident(layout.plan_model, po, floor);
  const int64_t total = MemInfo("MemTotal"), avail = MemInfo("MemAvailable");
  std::printf("memory: floor %s, every expert resident at %s; this machine: %s RAM, %s available\n",
              k3::FormatBytes(floor).c_str(), k3::FormatBytes(resident).c_str(), k3::FormatBytes(total).c_str(),
              k3::FormatBytes(avail).c_str());
  const int64_t usable = avail - avail / 10;  // headroom for the page cache and the rest of the system
  if (usable < floor)
    std::printf("budget: %s available is below the floor %s: k3 cannot run this model here\n",
                k3::FormatBytes(avail).c_str(), k3::FormatBytes(floor).c_str());
  else if (usable >= resident)
    std::printf("budget: --budget %s (every expert resident; more buys nothing)\n", BudgetText(resident).c_str());
  else
    std::printf("budget: --budget %s (90%% of the available RAM; experts beyond it stream from %s)\n",
                BudgetText(usable).c_str(), trunk_only ? "the expert server" : "disk");
  // The price of a token at the suggested budget: the plan's chunk, bytes read per generated
  // and per prompt token, and seconds at this disk's rate (a short O_DIRECT probe of the shards).
  if (usable >= floor) {
    const int64_t budget = std::max(plan::ParseBudget(BudgetText(std::min(usable, resident))), floor);
    const plan::MemoryPlan p = plan::MakePlan(layout.plan_model, budget, po);
    launch::PriceQuery q;
    try {
      const launch::DiskProbe d = launch::ProbeDiskRate(dir);
      q.disk_rate = d.bytes_per_second;
      q.rate_source = "probed: " + k3::FormatBytes(d.bytes) + " O_DIRECT from " + std::to_string(d.files) + " shards";
      q.prompt_tokens = p.prefill_chunk;
    } catch (const Error& e) {
      std::printf("disk rate: not probed (%s)\n", e.what());
    }
    const launch::PlanPrice price = launch::PricePlan(layout.plan_model, budget, po, p, q);
    std::printf("at --budget %s: %s%s", BudgetText(budget).c_str(), launch::ChunkLine(po, p).c_str(),
                launch::PriceLines(p, price, q).c_str());
  }
  struct statvfs vs{};
  if (statvfs(dir.c_str(), &vs) == 0)
    std::printf("disk: %s free on the model's filesystem\n",
                k3::FormatBytes(static_cast<int64_t>(vs.f_bavail) * static_cast<int64_t>(vs.f_frsize)).c_str());
  return kExitOk;
}

}  // namespace k3::model_tool
