// k3-server's engine thread: the one owner of its ZeroMQ sockets (control DEALER to the
// launcher, compute ROUTER that k3-compute connects to, tokenizer DEALER). It holds the request
// queue: prompts are encoded or chat-rendered by the tokenizer, wait for one of compute's
// `max_batch` places, and run as independent Generates (keep_state off). Generated ids are
// decoded one id at a time (each id's bytes asked once and cached), split into the reasoning
// and response channels (chat), cut at stop strings (then compute gets a Cancel) and handed to
// the request's HTTP thread as Deltas.
//
// Its jobs, one file each: engine.cpp (submission, health, the loop, the launcher's relays),
// engine_tokenizer.cpp (requests to the tokenizer, the chat control ids, each id's bytes),
// engine_dispatch.cpp (prompt checks, the queue, Generates and Cancels to compute, its
// replies), engine_output.cpp (tokens to Deltas, a request's end).
//
// Tool calls (services/server/tool_calls.h): the ids of the reply's tools channel are parsed
// at each <|sep|> and when the reply ends; each call accepted is handed out whole (its start,
// then its arguments' fragments), each one refused is added to the content and reported.
//
// Thread-safety: Submit, Healthy and NotReady are called from HTTP threads; Run from the
// engine thread only.
#pragma once
#include <zmq.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <variant>
#include <vector>

#include "common/chat_format.h"
#include "common/ipc/tokenizer_client.h"
#include "common/service/service_shell.h"
#include "common/stop_text.h"
#include "services/server/job.h"
#include "services/server/metrics.h"
#include "services/server/request_deadlines.h"

namespace k3::server {

// "call_<16 random hex digits>_": a reply's tool call ids are this and the call's index.
std::string ToolCallIdPrefix();

struct EngineConfig {
  std::string compute, tokenizer;    // endpoints: compute's (bound here), the tokenizer's (connected)
  std::vector<std::string> services;  // the run's other services: /health waits for their Ready
  int64_t context = 4096;
  int32_t vocab = 0;
  int max_batch = 1;
  int queue_size = 16;
  int prefill_chunk = 0;
  std::vector<int32_t> stop_ids;  // the model's end ids (common/end_ids.h), sorted
  // A prompt the tokenizer has not encoded (or a chat not rendered) this long fails with 504;
  // any tokenizer request unanswered this long makes /health 503 until the tokenizer answers.
  std::chrono::milliseconds tokenizer_timeout{std::chrono::seconds(30)};
  // A liveness Ping compute leaves unanswered this long (and kStepFactor x its longest pass)
  // makes /health 503 until it answers (compute_liveness.h).
  std::chrono::milliseconds compute_timeout{std::chrono::seconds(900)};
  RequestLimits limits{std::chrono::seconds(3600), {}};  // queue_timeout, run_timeout
};

class Engine {
 public:
  Engine(zmq::context_t& ctx, svc::ControlLink& ctl, EngineConfig cfg, Metrics& metrics);

  // A validated request: queued (its Job), or refused (429 when the queue is full, 503 while
  // stopping or before every service is ready).
  std::variant<std::shared_ptr<Job>, HttpError> Submit(RequestSpec spec);
  bool Healthy() const { return healthy_.load(); }
  std::string NotReady() const;  // what /health waits for

  // Serves until a Shutdown or a stop signal; `stop_http` is called then (every request still
  // open has failed with 503 by that time).
  void Run(const std::function<void()>& stop_http);

 private:
  struct Active {
    std::shared_ptr<Job> job;
    std::vector<int32_t> prompt;
    std::vector<ipc::compute::Token> tokens;  // as compute sent them
    size_t processed = 0;                     // tokens turned into text
    std::optional<ChannelSplitter> split;     // chat
    StopTextMatcher stop;
    std::string raw[3];           // bytes per ChannelSplitter::Channel
    size_t shown[3] = {0, 0, 0};  // of them, handed out
    bool queued = false, dispatched = false, cancel_sent = false, stop_matched = false;
    bool run_timed_out = false;  // run_timeout passed: the Cancel ends it as "length"
    std::chrono::steady_clock::time_point timed_out_at;
    std::chrono::steady_clock::time_point dispatched_at;  // the Generate sent: first-token time starts
    std::chrono::steady_clock::time_point first_token_at, last_token_at;  // arrivals here
    std::optional<ipc::compute::Done> done;
    int64_t reasoning_tokens = 0;  // ids before the answer's first (chat with thinking)
    bool answer_started = false;   // the response or the tools channel has opened
    std::vector<int32_t> tool_ids;  // the tools channel as generated (chat)
    size_t calls_sent = 0;          // of its calls, handed out
    std::string call_id_prefix;     // "call_<random>_": the calls' ids end in their index
    explicit Active(std::shared_ptr<Job> j) : job(std::move(j)), stop(job->spec.stop) {}
  };
  enum class TokKind { kPrompt, kDecode, kControl };
  struct TokPending {  // what a tokenizer request is for
    TokKind kind;
    uint64_t job = 0;
    int32_t id = -1;        // kDecode
    std::string name;       // kControl
    ipc::Clock::time_point sent{};
  };

  void HandleControl();
  void HandleCompute();
  void HandleTokenizer();
  void TakeSubmitted();
  // False when the message was not sent: over the tokenizer's message limit.
  bool SendTokenizer(TokPending p, const std::function<ipc::Encoded(uint64_t)>& make);
  void CheckTokenizerDeadlines();  // prompts past tokenizer_timeout fail; a probe when idle
  void AskControlIds();
  void OnPromptIds(uint64_t job, std::vector<int32_t> ids);
  void OnControlIds(const std::string& name, const std::vector<int32_t>& ids, const std::string& failure);
  void Dispatch();
  void CheckClientsGone();
  void CheckDeadlines();  // queue_timeout and run_timeout (request_deadlines.h)
  void CheckCompute();    // a liveness Ping each second; /health 503 while one is unanswered too long
  void SendCancel(Active& a);  // once, unless compute is done with it
  bool HaveBytes(int32_t id);
  void Process(Active& a);
  void Finish(uint64_t id);
  void Fail(uint64_t id, HttpError e, Outcome outcome);
  void Emit(Active& a, Delta d);
  void EmitToolCalls(Active& a, Delta& d, bool final);
  bool ToolBytesKnown(Active& a);
  void UpdateHealth();
  std::vector<int32_t> StopIdsFor(const Active& a) const;
  std::vector<int32_t> ConstraintEnd(const RequestSpec& spec) const;  // the ids forced after a constrained value

  zmq::context_t& ctx_;
  svc::ControlLink& ctl_;
  const EngineConfig cfg_;
  Metrics& metrics_;
  zmq::socket_t compute_, tok_;
  ipc::TokenizerRequests tok_requests_{tok_};  // sent again after 5 s and on the tokenizer's Ready
  ipc::RejectCounter rejects_;

  // Shared with HTTP threads.
  mutable std::mutex inbox_mu_;
  std::deque<std::shared_ptr<Job>> inbox_;
  uint64_t next_job_ = 1;
  int pending_ = 0;  // submitted, not yet sent to compute (the queue's depth)
  bool stopping_ = false;
  std::set<std::string> ready_;  // services whose Ready the launcher relayed
  std::string chat_error_;       // why chat cannot run ("" when it can, or not known yet)
  bool control_ids_known_ = false;
  std::atomic<bool> tokenizer_stalled_{false};  // a request has waited past tokenizer_timeout; cleared by any reply
  std::atomic<bool> compute_stalled_{false};  // a Ping unanswered past its deadline; cleared by any message from compute
  std::atomic<bool> healthy_{false};

  // Engine thread only.
  std::map<uint64_t, Active> active_;
  std::deque<uint64_t> waiting_;
  std::set<uint64_t> running_;
  std::map<uint64_t, TokPending> tok_pending_;  // by tokenizer request id
  std::unordered_map<int32_t, std::string> bytes_;  // token id -> its bytes
  std::set<int32_t> decoding_;
  std::optional<ChatControlIds> chat_ids_;
  std::map<std::string, std::vector<int32_t>> control_answers_;
  bool shutdown_ = false;
  ipc::Clock::time_point last_probe_{};
  std::optional<ipc::Clock::time_point> ping_unanswered_;  // a Ping sent then, nothing from compute since
  ipc::Clock::time_point last_ping_{};
  uint64_t ping_nonce_ = 0;
  double longest_step_ = 0;  // seconds of the longest pass compute reported (Step)
};

}  // namespace k3::server
