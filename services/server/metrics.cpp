#include "services/server/metrics.h"

#include <cstdio>

namespace k3::server {
namespace {

const char* OutcomeName(Outcome o) {
  switch (o) {
    case Outcome::kCompleted: return "completed";
    case Outcome::kCancelled: return "cancelled";
    case Outcome::kRejected: return "rejected";
    case Outcome::kInvalid: return "invalid";
    case Outcome::kFailed: return "failed";
  }
  return "failed";
}

void Metric(std::string& out, const char* name, const char* type, const char* help, double v) {
  char line[64];
  std::snprintf(line, sizeof line, "%.17g", v);
  out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n" + name + " " + line + "\n";
}

}  // namespace

void Metrics::Count(Outcome o) {
  std::lock_guard<std::mutex> lock(mu_);
  ++outcomes_[o];
}

void Metrics::Tokens(int64_t prompt, int64_t generated, int64_t cached) {
  std::lock_guard<std::mutex> lock(mu_);
  prompt_ += prompt;
  generated_ += generated;
  cached_ += cached;
}

void Metrics::Load(int64_t queued, int64_t running) {
  std::lock_guard<std::mutex> lock(mu_);
  queued_ = queued;
  running_ = running;
}

void Metrics::OnStep(const ipc::compute::Step& s) {
  std::lock_guard<std::mutex> lock(mu_);
  ++steps_;
  step_sequences_ += s.sequences;
  last_sequences_ = s.sequences;
  step_rows_ += s.rows;
  step_prefill_rows_ += s.prefill_rows;
  step_experts_ += s.experts;
  step_trunk_bytes_ += s.trunk_bytes;
  step_expert_bytes_ += s.expert_bytes;
  last_step_bytes_ = s.trunk_bytes + s.expert_bytes;
  step_seconds_ += s.seconds;
  last_step_seconds_ = s.seconds;
}

void Metrics::FirstToken(double seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  first_token_.Observe(seconds);
}

void Metrics::QueueWait(double seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  queue_wait_.Observe(seconds);
}

void Metrics::RequestDone(double seconds, double per_token) {
  std::lock_guard<std::mutex> lock(mu_);
  duration_.Observe(seconds);
  if (per_token >= 0) per_token_.Observe(per_token);
}

double Metrics::MeanRequestSeconds() const {
  std::lock_guard<std::mutex> lock(mu_);
  return duration_.count() > 0 ? duration_.sum() / static_cast<double>(duration_.count()) : 0.0;
}

void Metrics::OnServiceStats(const std::string& service, const std::vector<ipc::control::Stat>& stats) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const ipc::control::Stat& st : stats) service_[service][st.name] = st.value;
}

std::string Metrics::Prometheus() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::string out = "# HELP k3_requests_total Completion requests by how they ended.\n# TYPE k3_requests_total counter\n";
  for (Outcome o : {Outcome::kCompleted, Outcome::kCancelled, Outcome::kRejected, Outcome::kInvalid, Outcome::kFailed}) {
    const auto it = outcomes_.find(o);
    out += std::string("k3_requests_total{outcome=\"") + OutcomeName(o) + "\"} " +
           std::to_string(it == outcomes_.end() ? 0 : it->second) + "\n";
  }
  auto stat = [&](const char* service, const char* name) {
    const auto s = service_.find(service);
    if (s == service_.end()) return 0.0;
    const auto v = s->second.find(name);
    return v == s->second.end() ? 0.0 : v->second;
  };
  const double steps = static_cast<double>(steps_);
  Metric(out, "k3_prompt_tokens_total", "counter", "Prompt tokens of finished requests.", static_cast<double>(prompt_));
  Metric(out, "k3_cached_prompt_tokens_total", "counter", "Prompt tokens a cached prefix saved from prefill.",
         static_cast<double>(cached_));
  Metric(out, "k3_generated_tokens_total", "counter", "Tokens generated for finished requests.",
         static_cast<double>(generated_));
  out += first_token_.Exposition("k3_first_token_seconds",
                                  "Seconds from a request's Generate sent to compute to its first generated id.");
  out += per_token_.Exposition("k3_time_per_output_token_seconds",
                               "Per completed request: mean seconds between its generated ids as they arrived.");
  out += queue_wait_.Exposition("k3_queue_wait_seconds",
                                "Seconds from a request's arrival (encoding included) to its Generate sent to compute.");
  out += duration_.Exposition("k3_request_duration_seconds", "Seconds from a request's arrival to its completion.");
  Metric(out, "k3_queue_depth", "gauge", "Requests waiting for a place in compute's batch.", static_cast<double>(queued_));
  Metric(out, "k3_running_requests", "gauge", "Requests compute is running.", static_cast<double>(running_));
  Metric(out, "k3_steps_total", "counter", "Forward passes compute reported (Step).", steps);
  Metric(out, "k3_batch_size", "gauge", "Sequences in the last forward pass.", static_cast<double>(last_sequences_));
  Metric(out, "k3_batch_size_mean", "gauge", "Sequences per forward pass, mean over all passes.",
         steps > 0 ? static_cast<double>(step_sequences_) / steps : 0);
  Metric(out, "k3_step_seconds_sum", "counter", "Wall time of all forward passes.", step_seconds_);
  Metric(out, "k3_step_seconds", "gauge", "Wall time of the last forward pass.", last_step_seconds_);
  Metric(out, "k3_step_rows_total", "counter", "Positions fed through the layers.", static_cast<double>(step_rows_));
  Metric(out, "k3_step_prefill_rows_total", "counter", "Of them, prompt ids (the rest are decode tokens and drafts).",
         static_cast<double>(step_prefill_rows_));
  Metric(out, "k3_step_experts_total", "counter", "Distinct routed experts requested, summed over passes and layers.",
         static_cast<double>(step_experts_));
  Metric(out, "k3_step_trunk_bytes_total", "counter", "Trunk bytes the forward passes used.",
         static_cast<double>(step_trunk_bytes_));
  Metric(out, "k3_step_expert_bytes_total", "counter", "Routed-expert bytes the forward passes used.",
         static_cast<double>(step_expert_bytes_));
  Metric(out, "k3_step_bytes", "gauge", "Weight bytes (trunk + experts) the last forward pass used.",
         static_cast<double>(last_step_bytes_));
  const double read = stat("trunk-reader", "bytes_read") + stat("expert-fetcher", "bytes_read");
  Metric(out, "k3_bytes_read_total", "counter", "Bytes the trunk reader and expert fetcher read (as last reported).", read);
  Metric(out, "k3_bytes_read_per_step", "gauge", "k3_bytes_read_total over k3_steps_total.", steps > 0 ? read / steps : 0);
  Metric(out, "k3_expert_requests_total", "counter", "Expert requests the fetcher served (as last reported).",
         stat("expert-fetcher", "requests"));
  Metric(out, "k3_expert_hits_total", "counter", "Of them, experts already in the arena.", stat("expert-fetcher", "hits"));
  Metric(out, "k3_expert_hit_rate", "gauge", "Expert hits over requests (as last reported).",
         stat("expert-fetcher", "hit_rate"));
  return out;
}

}  // namespace k3::server
