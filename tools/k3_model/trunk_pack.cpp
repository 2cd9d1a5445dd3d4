#include "tools/k3_model/trunk_pack.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <deque>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <thread>
#include <vector>

#include "common/codec/coded_trunk.h"
#include "common/error.h"
#include "common/model_config.h"
#include "common/read_window.h"
#include "common/tensor_names.h"
#include "common/user_file.h"
#include "tools/k3_model/expert_digests.h"

namespace k3::model_tool {

namespace fs = std::filesystem;
using codec::CodedRun;
using codec::CodedTrunk;

namespace {

struct Fd {
  int fd = -1;
  explicit Fd(const std::string& path) : fd(open(path.c_str(), O_RDONLY | O_CLOEXEC)) {
    if (fd < 0) throw RuntimeFailure(path + ": " + std::strerror(errno));
  }
  ~Fd() { close(fd); }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
};

// Reads [offset, offset + n) or says how much was there.
uint64_t ReadUpTo(int fd, uint8_t* dst, uint64_t n, uint64_t offset, const std::string& path) {
  uint64_t done = 0;
  while (done < n) {
    const ssize_t r = pread(fd, dst + done, n - done, static_cast<off_t>(offset + done));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) throw RuntimeFailure(path + ": read failed at byte " + std::to_string(offset + done) + ": " + std::strerror(errno));
    if (r == 0) break;
    done += static_cast<uint64_t>(r);
  }
  return done;
}

// Runs `work(i)` for i in [0, n) on `threads` threads; the first error is rethrown.
template <class Work>
void Parallel(size_t n, int threads, Work work) {
  std::atomic<size_t> next{0};
  std::mutex mu;
  std::exception_ptr error;
  auto loop = [&] {
    try {
      for (size_t i; (i = next.fetch_add(1)) < n;) work(i);
    } catch (...) {
      std::lock_guard<std::mutex> lk(mu);
      if (!error) error = std::current_exception();
      next = n;
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < std::min<int>(threads, static_cast<int>(n)); ++t) pool.emplace_back(loop);
  loop();
  for (auto& t : pool) t.join();
  if (error) std::rethrow_exception(error);
}

// This thread's CPU seconds: a decode rate per core even when other processes share the cores.
double ThreadCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

double Since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

bool IsCodedTrunkDir(const std::string& dir) {
  std::error_code ec;
  return fs::exists(fs::path(dir) / codec::kCodedTrunkManifestFile, ec);
}

PackSummary PackTrunk(const std::string& src, const std::string& dst, int threads) {
  std::error_code ec;
  if (fs::exists(dst, ec) && !(fs::is_directory(dst, ec) && fs::is_empty(dst, ec)))
    throw UsageError(dst + " exists and is not an empty directory");
  const Checkpoint ck = Checkpoint::Open(src);
  const ModelConfig cfg = LoadModelConfig(src + "/config.json");
  ValidateCheckpoint(ck, cfg);
  CodedTrunk t;
  t.num_layers = cfg.num_layers;
  t.shards = MakeManifest(ck, cfg, {}, false).shards;
  t.runs = codec::PlanCodedRuns(ck, cfg);
  fs::create_directories(dst, ec);
  if (ec) throw Error(kExitOutput, dst + ": " + ec.message());

  const auto t0 = std::chrono::steady_clock::now();
  const std::string data_path = (fs::path(dst) / codec::kCodedTrunkDataFile).string();
  AtomicFile data(data_path, "coded trunk", kExitOutput);
  const std::vector<uint8_t> zeros(kReadAlign, 0);
  data.Write(zeros.data(), codec::kCodedHeaderBytes);  // the header, rewritten at the end
  std::deque<Fd> fds;  // deque: an Fd never moves
  for (const std::string& p : ck.shard_paths()) fds.emplace_back(p);

  PackSummary sum;
  uint64_t offset = codec::kCodedHeaderBytes, total = 0, shown = 0;
  for (const CodedRun& r : t.runs) total += r.end - r.begin;
  const size_t batch = static_cast<size_t>(std::max(1, threads));
  std::vector<std::vector<uint8_t>> coded(batch);
  for (size_t first = 0; first < t.runs.size(); first += batch) {
    const size_t n = std::min(batch, t.runs.size() - first);
    Parallel(n, threads, [&](size_t k) {
      CodedRun& r = t.runs[first + k];
      const std::string& path = ck.shard_paths()[static_cast<size_t>(r.shard)];
      std::vector<uint8_t> bytes(r.end - r.begin);
      if (ReadUpTo(fds[static_cast<size_t>(r.shard)].fd, bytes.data(), bytes.size(), r.begin, path) != bytes.size())
        throw BadModel(path + ": ends inside " + RunOwner(t, r) + "'s trunk bytes (truncated shard)");
      r.digest = ExpertDigestOf(bytes.data(), bytes.size());
      coded[k] = codec::EncodeRun(bytes.data(), bytes.size(), r.spans);
      r.coded_digest = ExpertDigestOf(coded[k].data(), coded[k].size());
    });
    for (size_t k = 0; k < n; ++k) {  // in file order, each run 4096-aligned
      CodedRun& r = t.runs[first + k];
      r.coded_offset = offset;
      r.coded_bytes = coded[k].size();
      data.Write(coded[k].data(), coded[k].size());
      const uint64_t pad = AlignUp(r.coded_bytes) - r.coded_bytes;
      data.Write(zeros.data(), pad);
      offset += r.coded_bytes + pad;
      sum.source_bytes += r.end - r.begin;
      sum.coded_bytes += r.coded_bytes;
      std::vector<uint8_t>().swap(coded[k]);
    }
    if (sum.source_bytes * 20 / std::max<uint64_t>(1, total) > shown && sum.source_bytes < total) {
      shown = sum.source_bytes * 20 / total;
      std::fprintf(stderr, "[k3-model] pack-trunk: %llu%% (%.1f of %.1f MB, coded %.3fx, %.0f MB/s)\n",
                   static_cast<unsigned long long>(sum.source_bytes * 100 / total), sum.source_bytes / 1e6, total / 1e6,
                   static_cast<double>(sum.coded_bytes) / static_cast<double>(sum.source_bytes),
                   sum.source_bytes / 1e6 / std::max(1e-9, Since(t0)));
    }
  }
  t.file_bytes = offset;
  t.pack_id = codec::PackId(t.runs);
  const auto header = codec::CodedHeader(t);
  if (std::fseek(data.stream(), 0, SEEK_SET) != 0)
    throw Error(kExitOutput, "coded trunk " + data_path + ": cannot seek (" + std::strerror(errno) + ")");
  data.Write(header.data(), header.size());
  data.Commit();
  // The manifest last: a directory with a manifest has its whole data file.
  WriteFileAtomically((fs::path(dst) / codec::kCodedTrunkManifestFile).string(), codec::CodedTrunkJson(t),
                      "coded trunk manifest", kExitOutput);
  sum.runs = t.runs.size();
  sum.file_bytes = t.file_bytes;
  sum.seconds = Since(t0);
  return sum;
}

namespace {

// The release's side of the binding: its layout, then each run's source bytes against the digest.
void CheckRelease(const CodedTrunk& t, const std::string& release, const std::string& mpath, int threads) {
  const Checkpoint ck = Checkpoint::Open(release);
  const ModelConfig cfg = LoadModelConfig(release + "/config.json");
  codec::CheckCodedTrunkFits(t, ck, cfg, mpath);
  std::deque<Fd> fds;
  for (const std::string& p : ck.shard_paths()) fds.emplace_back(p);
  Parallel(t.runs.size(), threads, [&](size_t i) {
    const CodedRun& r = t.runs[i];
    const std::string& path = ck.shard_paths()[static_cast<size_t>(r.shard)];
    std::vector<uint8_t> bytes(r.end - r.begin);
    if (ReadUpTo(fds[static_cast<size_t>(r.shard)].fd, bytes.data(), bytes.size(), r.begin, path) != bytes.size())
      throw BadModel(path + ": ends inside " + RunOwner(t, r) + "'s trunk bytes (truncated shard)");
    if (ExpertDigestOf(bytes.data(), bytes.size()) != r.digest)
      throw BadModel(mpath + " is not a coded trunk of " + release + ": run " + std::to_string(i) + " (" + RunOwner(t, r) +
                     ", bytes " + std::to_string(r.begin) + ".." + std::to_string(r.end) + " of " + path +
                     ") has other bytes than the packed ones");
  });
  std::printf("release: %s is the packed release (shard names and sizes, and the bytes of all %zu runs)\n",
              release.c_str(), t.runs.size());
}

}  // namespace

int CheckCodedTrunk(const std::string& dir, const std::string& release, int threads) {
  const std::string mpath = (fs::path(dir) / codec::kCodedTrunkManifestFile).string();
  const std::string path = (fs::path(dir) / codec::kCodedTrunkDataFile).string();
  const CodedTrunk t = codec::LoadCodedTrunk(mpath);
  struct stat st{};
  if (stat(path.c_str(), &st) != 0) throw BadModel(path + ": " + std::strerror(errno) + " (the manifest " + mpath + " names it)");
  if (!S_ISREG(st.st_mode)) throw BadModel(path + ": not a regular file");
  const Fd fd(path);
  std::vector<uint8_t> header(codec::kCodedHeaderBytes);
  codec::CheckCodedHeader(header.data(), ReadUpTo(fd.fd, header.data(), header.size(), 0, path), t, path);
  if (static_cast<uint64_t>(st.st_size) != t.file_bytes)
    throw BadModel(path + ": " + std::to_string(st.st_size) + " bytes, the manifest says " + std::to_string(t.file_bytes) +
                   (static_cast<uint64_t>(st.st_size) < t.file_bytes ? " (truncated)" : ""));
  uint64_t source = 0, coded = 0;
  for (const CodedRun& r : t.runs) source += r.end - r.begin, coded += r.coded_bytes;
  std::printf("coded trunk: %s (version %d, %s, %zu runs: %.1f MB coded for %.1f MB of trunk, %.4fx)\n", path.c_str(),
              codec::kCodedTrunkVersion, codec::kCodedTrunkCodec, t.runs.size(), coded / 1e6, source / 1e6,
              static_cast<double>(coded) / static_cast<double>(source));
  std::printf("release: %zu shards (%s ... %s), pack id %s\n", t.shards.size(), t.shards.front().file.c_str(),
              t.shards.back().file.c_str(), DigestHex(t.pack_id).substr(0, 16).c_str());

  const auto t0 = std::chrono::steady_clock::now();
  std::atomic<double> decode_seconds{0};
  Parallel(t.runs.size(), threads, [&](size_t i) {
    const CodedRun& r = t.runs[i];
    const std::string where = "run " + std::to_string(i) + " (" + RunOwner(t, r) + ", bytes " + std::to_string(r.begin) +
                              ".." + std::to_string(r.end) + " of " + t.shards[static_cast<size_t>(r.shard)].file + ")";
    std::vector<uint8_t> c(r.coded_bytes);
    if (ReadUpTo(fd.fd, c.data(), c.size(), r.coded_offset, path) != c.size()) throw BadModel(path + ": " + where + " is cut short");
    if (ExpertDigestOf(c.data(), c.size()) != r.coded_digest)
      throw BadModel(path + ": " + where + ": its coded bytes do not match their digest in " + mpath + " (a corrupt copy)");
    std::vector<uint8_t> out(r.end - r.begin);
    const double d0 = ThreadCpuSeconds();
    try {
      codec::DecodeRun(c.data(), c.size(), out.data(), out.size());
    } catch (const Error& e) {
      throw BadModel(path + ": " + where + ": " + e.what());
    }
    decode_seconds.fetch_add(ThreadCpuSeconds() - d0);
    if (ExpertDigestOf(out.data(), out.size()) != r.digest)
      throw BadModel(path + ": " + where + " decodes to bytes that differ from the release's digest in " + mpath);
  });
  std::printf("decoded: all %zu runs give the release's bytes (digests match); %.2f s, decode %.2f GB/s per core (%s)\n",
              t.runs.size(), Since(t0), source / 1e9 / std::max(1e-9, decode_seconds.load()), codec::IsaName(codec::Isa::kAuto));
  if (!release.empty()) CheckRelease(t, release, mpath, threads);
  return kExitOk;
}

}  // namespace k3::model_tool
