// The server's counters and the Prometheus text of GET /metrics (prefix k3_, docs/server.md).
// Requests and tokens are counted by the engine; per-step figures come from compute's Step
// messages; the expert hit rate and bytes read from the weight services' control Stats, which
// the launcher relays.
//
// Thread-safety: every method locks; the engine writes, HTTP threads read and count rejections.
#pragma once
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "common/ipc/messages.h"
#include "services/server/histogram.h"

namespace k3::server {

// How a request ended, the `outcome` label of k3_requests_total.
enum class Outcome { kCompleted, kCancelled, kRejected, kInvalid, kFailed };

class Metrics {
 public:
  void Count(Outcome o);
  void Tokens(int64_t prompt, int64_t generated, int64_t cached);
  void Load(int64_t queued, int64_t running);
  void OnStep(const ipc::compute::Step& s);
  // A request's first generated id arrived `seconds` after its Generate was sent to compute.
  void FirstToken(double seconds);
  // A request waited `seconds` from its submission (encoding included) to its Generate.
  void QueueWait(double seconds);
  // A request completed `seconds` after its submission; `per_token` is the mean time between
  // its generated ids as they arrived (< 0: fewer than two ids, not observed).
  void RequestDone(double seconds, double per_token);
  // The mean duration of completed requests (0 before the first): Retry-After's estimate.
  double MeanRequestSeconds() const;
  void OnServiceStats(const std::string& service, const std::vector<ipc::control::Stat>& stats);
  std::string Prometheus() const;

 private:
  mutable std::mutex mu_;
  std::map<Outcome, uint64_t> outcomes_;
  int64_t prompt_ = 0, generated_ = 0, cached_ = 0, queued_ = 0, running_ = 0;
  uint64_t steps_ = 0;
  int64_t step_sequences_ = 0, last_sequences_ = 0, step_rows_ = 0, step_prefill_rows_ = 0, step_experts_ = 0;
  int64_t step_trunk_bytes_ = 0, step_expert_bytes_ = 0, last_step_bytes_ = 0;
  double step_seconds_ = 0, last_step_seconds_ = 0;
  Histogram first_token_, per_token_, queue_wait_, duration_;
  std::map<std::string, std::map<std::string, double>> service_;  // relayed Stats: service -> name -> value
};

}  // namespace k3::server
