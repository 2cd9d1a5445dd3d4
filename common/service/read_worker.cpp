#include "common/service/read_worker.h"

#include <cerrno>
#include <exception>

#include "common/error.h"

namespace k3::svc {

ReadWorker::ReadWorker(zmq::context_t& ctx, const std::string& notify_name, const std::string& backend,
                       const std::vector<std::string>& shards, int inflight)
    : wake_(ctx, notify_name) {
  io::ReaderOptions opts;
  opts.threads = inflight;
  opts.queue_depth = inflight;
  for (const auto& path : shards) readers_.push_back(io::OpenBlockReader(backend, path, opts));
  thread_ = std::thread([this] { Run(); });
}

ReadWorker::~ReadWorker() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void ReadWorker::Submit(ReadJob job) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    jobs_.push_back(std::move(job));
    ++pending_;
  }
  cv_.notify_one();
}

std::vector<ReadDone> ReadWorker::TakeCompleted() {
  wake_.Drain();
  std::vector<ReadDone> out;
  std::lock_guard<std::mutex> lk(mu_);
  out.swap(done_);
  pending_ -= out.size();
  return out;
}

void ReadWorker::Run() {
  for (;;) {
    ReadJob job;
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [this] { return stop_ || !jobs_.empty(); });
      // Queued jobs are abandoned on stop: their slots are never published.
      if (stop_) return;
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    ReadDone d{job.tag, 0, {}};
    try {
      if (job.shard < 0 || static_cast<size_t>(job.shard) >= readers_.size())
        throw RuntimeFailure("read job names shard " + std::to_string(job.shard));
      readers_[static_cast<size_t>(job.shard)]->Read(job.requests);
      for (const auto& r : job.requests) d.bytes += r.length;
    } catch (const std::exception& e) {
      d.error = e.what();
    }
    {
      std::lock_guard<std::mutex> lk(mu_);
      done_.push_back(std::move(d));
    }
    wake_.Signal();
  }
}

}  // namespace k3::svc
