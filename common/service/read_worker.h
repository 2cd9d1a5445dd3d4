// ReadWorker: one I/O thread per service that runs BlockReader batches off the socket thread,
// so the service loop keeps answering while bytes land. Jobs run in submission order (callers
// submit in file-offset order); each job's requests are read with the backend's own
// parallelism (threads / queue depth = --inflight), so several chunks are in flight.
// Completions are queued and announced on an inproc ZeroMQ PAIR socket, which the service loop
// polls next to its ROUTER socket.
//
// Ownership: owns the thread, one BlockReader per shard and its end of the notify pair.
// Thread-safety: Submit/TakeCompleted from the service thread only.
#pragma once
#include <zmq.hpp>

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

 private:
  void Run();
  std::vector<std::unique_ptr<io::BlockReader>> readers_;
  WakePair wake_;  // signalled by the worker thread only
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<ReadJob> jobs_;
  std::vector<ReadDone> done_;
  bool stop_ = false;
  size_t pending_ = 0;  // submitted, not yet taken
  std::thread thread_;
};

}  // namespace k3::svc
