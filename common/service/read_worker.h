// ReadWorker: the I/O threads of a service. They run read jobs off the socket thread, so the
// service loop keeps answering while bytes land. A job's requests are cut into chunks
// (io::ReaderOptions' chunk size) and `inflight` runner threads claim chunks in submission
// order across jobs: when a job's last chunks are in flight, free runners already start the
// next job's, so the queue does not drain at every job boundary (a ring slot, a trunk piece,
// an expert). Completions are still one per job, in submission order, queued and announced
// on an inproc ZeroMQ PAIR socket, which the service loop polls next to its ROUTER socket.
//
// Ownership: owns the runner threads, the BlockReaders (one per shard; with uring, whose
// ring serialises its callers, one per shard and runner) and its end of the notify pair.
// Thread-safety: Submit/TakeCompleted from the service thread only.
#pragma once
#include <zmq.hpp>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/io/block_reader.h"
#include "common/service/wake_pair.h"

namespace k3::svc {

struct ReadJob {
  uint64_t tag = 0;  // chosen by the caller, returned in the completion
  int shard = 0;     // index into the shard list given to the worker
  std::vector<io::ReadRequest> requests;
};

struct ReadDone {
  uint64_t tag = 0;
  uint64_t bytes = 0;
  std::string error;  // empty on success: the one-line k3::Error message otherwise
  bool corrupt = false;  // bytes arrived but failed their length or checksum check (remote reads)
  std::string source{};  // remote reads: the expert server the bytes came from
};

class ReadWorker {
 public:
  // Opens every shard with `backend` (k3::Error on a bad backend or unreadable file) and
  // binds "inproc://<notify_name>" on `ctx`; Notifier() connects the service's end.
  ReadWorker(zmq::context_t& ctx, const std::string& notify_name, const std::string& backend,
             const std::vector<std::string>& shards, int inflight);
  ~ReadWorker();
  ReadWorker(const ReadWorker&) = delete;
  ReadWorker& operator=(const ReadWorker&) = delete;

  // The socket the service polls; readable when a completion may be waiting.
  zmq::socket_t& notifier() { return wake_.socket(); }
  void Submit(ReadJob job);
  // Drains the notifier and returns every finished job.
  std::vector<ReadDone> TakeCompleted();
  size_t pending() const { return pending_; }
  uint64_t file_size(int shard) const { return readers_.at(static_cast<size_t>(shard))->file_size(); }
  const char* backend() const { return readers_.empty() ? "" : readers_[0]->backend(); }
  // The most distinct jobs that had chunks in flight at once (2 once a job boundary overlapped).
  int max_jobs_in_flight() const { return max_jobs_in_flight_.load(); }

 private:
  struct Active {  // a submitted job, until its completion is queued
    uint64_t seq = 0;  // submission number (tags need not be unique)
    uint64_t tag = 0;
    int shard = 0;
    std::vector<io::ReadRequest> chunks;
    size_t next = 0;       // first chunk not yet claimed
    size_t in_flight = 0;  // claimed, not finished
    uint64_t bytes = 0;
    std::string error;
  };
  void Run(size_t runner);
  io::BlockReader& ReaderFor(size_t runner, int shard);
  void PublishFinished();  // under mu_: finished jobs at the front become completions

  std::string backend_name_;
  std::vector<std::string> shards_;
  std::vector<std::unique_ptr<io::BlockReader>> readers_;
  std::vector<std::vector<std::unique_ptr<io::BlockReader>>> own_readers_;  // uring: per runner
  WakePair wake_;  // signalled by the runner threads only
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Active> active_;
  std::vector<ReadDone> done_;
  bool stop_ = false;
  size_t pending_ = 0;  // submitted, not yet taken
  uint64_t next_seq_ = 0;
  std::atomic<int> max_jobs_in_flight_{0};
  std::vector<std::thread> runners_;
};

}  // namespace k3::svc
