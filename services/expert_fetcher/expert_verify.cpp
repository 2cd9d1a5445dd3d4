#include "services/expert_fetcher/expert_verify.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <filesystem>

#include "common/error.h"

namespace k3::svc {

ExpertVerifier::ExpertVerifier(zmq::context_t& ctx, const std::string& notify_name, Manifest manifest,
                               std::string manifest_path, int threads)
    : manifest_(std::move(manifest)),
      manifest_path_(std::move(manifest_path)),
      notify_rx_(ctx, zmq::socket_type::pair),
      notify_tx_(ctx, zmq::socket_type::pair) {
  const std::string ep = "inproc://" + notify_name;
  notify_rx_.bind(ep);
  notify_tx_.connect(ep);
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
    jobs_.push_back({std::move(done), layer, expert, bytes, length, server, {}});
    ++pending_;
  }
  cv_.notify_one();
}

std::vector<ReadDone> ExpertVerifier::TakeCompleted() {
  zmq::message_t m;
  for (;;) {  // drain the wake-ups; a signal interrupting a receive is retried
    try {
      if (!notify_rx_.recv(m, zmq::recv_flags::dontwait)) break;
    } catch (const zmq::error_t& e) {
      if (e.num() != EINTR) throw;
    }
  }
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
    Job job;
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [this] { return stop_ || !jobs_.empty(); });
      if (stop_) return;  // queued jobs are abandoned: their slots are never published
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    if (!manifest_.has(job.layer, job.expert)) {
      job.mismatch = "the manifest has no digest for it";
    } else {
      const ExpertDigest got = DigestBytes(job.bytes, job.length);
      const ExpertDigest& want = manifest_.at(job.layer, job.expert);
      if (got != want)
        job.mismatch = "SHA-256 " + DigestHex(got).substr(0, 16) + "..., expected " + DigestHex(want).substr(0, 16) + "...";
    }
    std::lock_guard<std::mutex> lk(mu_);  // also serialises the workers' sends
    done_.push_back(std::move(job));
    for (;;) {
      try {
        notify_tx_.send(zmq::str_buffer(""), zmq::send_flags::dontwait);
      } catch (const zmq::error_t& e) {
        if (e.num() == EINTR) continue;  // a signal: the wake-up must still be sent
        // The PAIR queue is full only if the loop stopped draining; the job is in done_.
      }
      break;
    }
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
