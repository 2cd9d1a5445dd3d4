#include "services/expert_fetcher/expert_verify.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "common/error.h"

namespace k3::svc {

ExpertVerifier::ExpertVerifier(zmq::context_t& ctx, const std::string& notify_name, Manifest manifest,
                               std::string manifest_path, int threads)
    : manifest_(std::move(manifest)),
      manifest_path_(std::move(manifest_path)),
      wake_(ctx, notify_name) {
  for (int i = 0; i < std::max(1, threads); ++i) threads_.emplace_back([this] { Run(); });
}

ExpertVerifier::~ExpertVerifier() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
}

void ExpertVerifier::Submit(ReadDone done, int layer, int expert, const uint8_t* bytes, uint64_t length,
                            const std::string& server) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    Job& j = active_.emplace_back();
    j.done = std::move(done);
    j.layer = layer;
    j.expert = expert;
    j.bytes = bytes;
    j.length = length;
    j.server = server;
    j.chunks.resize(DigestChunks(length));
    j.left = j.chunks.size();
    for (size_t c = 0; c < j.chunks.size(); ++c) tasks_.push_back({&j, c});
    ++pending_;
    if (j.left == 0) Finish(j);
  }
  cv_.notify_all();
}

void ExpertVerifier::Finish(Job& job) {
  if (!manifest_.has(job.layer, job.expert)) {
    job.mismatch = "the manifest has no digest for it";
  } else {
    const ExpertDigest got = CombineChunkDigests(job.chunks);
    const ExpertDigest& want = manifest_.at(job.layer, job.expert);
    if (got != want)
      job.mismatch = "SHA-256 " + DigestHex(got).substr(0, 16) + "..., expected " + DigestHex(want).substr(0, 16) + "...";
  }
  for (auto it = active_.begin(); it != active_.end(); ++it)
    if (&*it == &job) {
      done_.push_back(std::move(*it));
      active_.erase(it);
      break;
    }
  wake_.Signal();
}

std::vector<ReadDone> ExpertVerifier::TakeCompleted() {
  wake_.Drain();
  std::vector<Job> jobs;
  {
    std::lock_guard<std::mutex> lk(mu_);
    jobs.swap(done_);
    pending_ -= jobs.size();
  }
  std::vector<ReadDone> out;
  for (Job& j : jobs) {
    if (j.mismatch.empty()) {
      ++verified_;
    } else {  // like a failed XXH3 check: the waiters get ExpertFailed{BadChecksum}
      ++mismatches_;
      j.done.bytes = 0;
      j.done.corrupt = true;
      j.done.error = "bytes from expert server " + j.server + " do not match the manifest " + manifest_path_ + " (" +
                     j.mismatch + ")";
    }
    out.push_back(std::move(j.done));
  }
  return out;
}

void ExpertVerifier::Run() {
  for (;;) {
    Task t;
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [this] { return stop_ || !tasks_.empty(); });
      if (stop_) return;  // queued work is abandoned: those slots are never published
      t = tasks_.front();
      tasks_.pop_front();
    }
    const uint64_t at = t.chunk * kDigestChunkBytes;
    const ExpertDigest d =
        DigestBytes(t.job->bytes + at, static_cast<size_t>(std::min(kDigestChunkBytes, t.job->length - at)));
    std::lock_guard<std::mutex> lk(mu_);  // also serialises the workers' wake-ups
    t.job->chunks[t.chunk] = d;
    if (--t.job->left == 0) Finish(*t.job);
  }
}

std::unique_ptr<ExpertVerifier> StartVerifier(zmq::context_t& ctx, const std::string& model_dir,
                                              const std::string& manifest_flag, const ModelConfig& cfg, bool remote,
                                              bool no_verify) {
  std::optional<Manifest> m = CheckExpertSource(model_dir, manifest_flag, cfg, remote, no_verify);
  if (!m || !remote || no_verify) return nullptr;
  const std::string path = manifest_flag.empty() ? DefaultManifestPath(model_dir) : manifest_flag;
  const int threads = static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 1u, 4u));
  std::fprintf(stderr, "[expert-fetcher] every expert from the server is checked against %s (SHA-256, %d threads)\n",
               path.c_str(), threads);
  return std::make_unique<ExpertVerifier>(ctx, "experts-verify", std::move(*m), path, threads);
}

}  // namespace k3::svc
