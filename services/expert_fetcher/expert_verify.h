// ExpertVerifier: checks each expert that arrived from a k3-expert-server against the local
// expert manifest (common/manifest.h) before the fetcher publishes its slot. The XXH3 check
// of the transfer only proves the bytes are the ones the server sent; the manifest's SHA-256,
// taken from a trusted copy, proves they are the model's. Hashing runs on worker threads
// (SHA-256 is ~1.4 GB/s per core, slower than a fast link): the loop keeps receiving while
// earlier experts are checked, and the 4 MiB chunks of one expert are hashed by several
// threads at once, so an expert waits a fraction of its single-thread hashing time.
// Completions are announced on a WakePair the loop polls, like ReadWorker's.
//
// Ownership: owns the threads and the manifest. Thread-safety: Submit/TakeCompleted from the
// fetcher's loop thread only.
#pragma once
#include <zmq.hpp>

#include <condition_variable>
#include <memory>
#include <cstdint>
#include <deque>
#include <list>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/manifest.h"
#include "common/service/read_worker.h"
#include "common/service/wake_pair.h"

namespace k3::svc {

class ExpertVerifier {
 public:
  // `threads` hashing threads (at least 1); binds "inproc://<notify_name>" on `ctx`.
  ExpertVerifier(zmq::context_t& ctx, const std::string& notify_name, Manifest manifest, std::string manifest_path,
                 int threads);
  ~ExpertVerifier();
  ExpertVerifier(const ExpertVerifier&) = delete;
  ExpertVerifier& operator=(const ExpertVerifier&) = delete;

  zmq::socket_t& notifier() { return wake_.socket(); }
  // `done` is a successful read of expert (layer, expert): its `length` bytes at `bytes`
  // came from the expert server `server`. It comes back from TakeCompleted once checked.
  void Submit(ReadDone done, int layer, int expert, const uint8_t* bytes, uint64_t length, const std::string& server);
  // The reads checked so far. An expert whose bytes differ from the manifest comes back as a
  // corrupt read naming the server (the fetcher's ExpertFailed adds layer and expert): its slot
  // is never published, and compute ends the run when it needs that expert (exit 1).
  std::vector<ReadDone> TakeCompleted();
  size_t pending() const { return pending_; }
  uint64_t verified() const { return verified_; }
  uint64_t mismatches() const { return mismatches_; }

 private:
  struct Job {
    ReadDone done;
    int layer = 0, expert = 0;
    const uint8_t* bytes = nullptr;
    uint64_t length = 0;
    std::string server;
    std::vector<ExpertDigest> chunks;  // filled by the workers
    size_t left = 0;                   // chunks not hashed yet
    std::string mismatch;              // set when the digest differs
  };
  struct Task {
    Job* job = nullptr;
    size_t chunk = 0;
  };
  void Run();
  void Finish(Job& job);  // all chunks hashed: compare (under mu_)

  Manifest manifest_;
  std::string manifest_path_;
  WakePair wake_;  // workers signal under mu_
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Task> tasks_;
  std::list<Job> active_;  // submitted, not all chunks hashed (stable addresses for the tasks)
  std::vector<Job> done_;
  bool stop_ = false;
  size_t pending_ = 0;  // submitted, not yet taken
  uint64_t verified_ = 0, mismatches_ = 0;
  std::vector<std::thread> threads_;
};

// What the fetcher does with the manifest at start: the rules of CheckExpertSource
// (common/manifest.h), then the verifier for remote reads (null for local reads or with
// `no_verify`).
std::unique_ptr<ExpertVerifier> StartVerifier(zmq::context_t& ctx, const std::string& model_dir,
                                              const std::string& manifest_flag, const ModelConfig& cfg, bool remote,
                                              bool no_verify);

}  // namespace k3::svc
