#include "common/service/read_worker.h"

#include <algorithm>
#include <exception>

#include "common/error.h"

namespace k3::svc {
namespace {

// Cuts a job's requests into chunks of at most `chunk` bytes, in order.
std::vector<io::ReadRequest> Chunked(const std::vector<io::ReadRequest>& requests, uint64_t chunk) {
  std::vector<io::ReadRequest> out;
  for (const auto& r : requests)
    for (uint64_t at = 0; at < r.length; at += chunk)
      out.push_back({r.offset + at, std::min(chunk, r.length - at), r.dst + at});
  return out;
}

}  // namespace

ReadWorker::ReadWorker(zmq::context_t& ctx, const std::string& notify_name, const std::string& backend,
                       const std::vector<std::string>& shards, int inflight)
    : backend_name_(backend), shards_(shards), wake_(ctx, notify_name) {
  io::ReaderOptions opts;
  opts.threads = 1;  // a runner reads one chunk at a time; the runners are the parallelism
  opts.queue_depth = 1;
  for (const auto& path : shards) readers_.push_back(io::OpenBlockReader(backend, path, opts));
  const size_t runners = static_cast<size_t>(std::max(1, inflight));
  own_readers_.resize(runners);
  for (size_t r = 0; r < runners; ++r) runners_.emplace_back([this, r] { Run(r); });
}

ReadWorker::~ReadWorker() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& t : runners_) t.join();
}

void ReadWorker::Submit(ReadJob job) {
  Active a;
  a.tag = job.tag;
  a.shard = job.shard;
  a.chunks = Chunked(job.requests, io::ReaderOptions{}.chunk_bytes);
  for (const auto& r : job.requests) a.bytes += r.length;
  if (job.shard < 0 || static_cast<size_t>(job.shard) >= readers_.size()) {
    a.error = "read job names shard " + std::to_string(job.shard);
    a.chunks.clear();
  }
  {
    std::lock_guard<std::mutex> lk(mu_);
    a.seq = next_seq_++;
    active_.push_back(std::move(a));
    ++pending_;
    PublishFinished();  // a job with nothing to read is finished already
  }
  cv_.notify_all();
}

std::vector<ReadDone> ReadWorker::TakeCompleted() {
  wake_.Drain();
  std::vector<ReadDone> out;
  std::lock_guard<std::mutex> lk(mu_);
  out.swap(done_);
  pending_ -= out.size();
  return out;
}

io::BlockReader& ReadWorker::ReaderFor(size_t runner, int shard) {
  // uring serialises the callers of one ring, so each runner has its own rings; the other
  // backends read a one-chunk batch in the calling thread.
  if (runner == 0 || backend_name_ != "uring") return *readers_[static_cast<size_t>(shard)];
  auto& own = own_readers_[runner];
  if (own.empty()) own.resize(shards_.size());
  auto& r = own[static_cast<size_t>(shard)];
  if (!r) {
    io::ReaderOptions opts;
    opts.threads = 1;
    opts.queue_depth = 1;
    r = io::OpenBlockReader(backend_name_, shards_[static_cast<size_t>(shard)], opts);
  }
  return *r;
}

void ReadWorker::PublishFinished() {
  bool any = false;
  while (!active_.empty() && active_.front().in_flight == 0 &&
         (active_.front().next >= active_.front().chunks.size() || !active_.front().error.empty())) {
    Active& a = active_.front();
    done_.push_back(ReadDone{a.tag, a.error.empty() ? a.bytes : 0, a.error});
    active_.pop_front();
    any = true;
  }
  if (any) wake_.Signal();
}

void ReadWorker::Run(size_t runner) {
  std::unique_lock<std::mutex> lk(mu_);
  for (;;) {
    // The first job in submission order with a chunk left (a failed job claims no more).
    auto claim = [this] {
      return std::find_if(active_.begin(), active_.end(),
                          [](const Active& a) { return a.error.empty() && a.next < a.chunks.size(); });
    };
    cv_.wait(lk, [&] { return stop_ || claim() != active_.end(); });
    // Queued jobs are abandoned on stop: their slots are never published.
    if (stop_) return;
    auto it = claim();
    const uint64_t seq = it->seq;
    const int shard = it->shard;
    const io::ReadRequest chunk = it->chunks[it->next++];
    ++it->in_flight;
    const int jobs = static_cast<int>(
        std::count_if(active_.begin(), active_.end(), [](const Active& a) { return a.in_flight > 0; }));
    if (jobs > max_jobs_in_flight_.load()) max_jobs_in_flight_.store(jobs);
    lk.unlock();
    std::string error;
    try {
      ReaderFor(runner, shard).Read(chunk.offset, chunk.length, chunk.dst);
    } catch (const std::exception& e) {
      error = e.what();
    }
    lk.lock();
    // A job leaves active_ only when it has nothing in flight, so this one is still there.
    auto job = std::find_if(active_.begin(), active_.end(), [&](const Active& a) { return a.seq == seq; });
    --job->in_flight;
    if (!error.empty() && job->error.empty()) job->error = error;
    PublishFinished();
  }
}

}  // namespace k3::svc
