// The one-shot exchange of a run (not --chat, not --serve): one Generate to compute, its Tokens
// in order, its Done. Pure bookkeeping; run_generate.cpp does the sending and receiving.
#pragma once
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/ipc/messages.h"
#include "launcher/options.h"

namespace k3::launch {

constexpr uint64_t kGenerateId = 1;  // the one Generate of a run; Tokens and Done name it
constexpr uint64_t kStateOpId = 2;   // the state-file operations (--load-state, --save-state)

// The run's Generate: the prompt, --gen, the stop ids (end ids + --stop-id), sampling; appended
// to the loaded sequence with --load-state.
ipc::compute::Generate OneShotGenerate(const LaunchOptions& opt, const std::vector<int32_t>& ids,
                                       const std::vector<int32_t>& stop_ids);

// The warning when compute's Done counts differ from what arrived (Tokens were lost), or "".
std::string LostTokensWarning(const ipc::compute::RunStats& done, size_t generated, size_t prompt_sent);

class OneShot {
 public:
  using Clock = std::chrono::steady_clock;
  explicit OneShot(bool keep_logprobs) : keep_logprobs_(keep_logprobs) {}

  void Sent(size_t prompt_ids, Clock::time_point now) {
    prompt_sent_ = prompt_ids;
    t_generate_ = now;
    sent_ = true;
  }
  bool sent() const { return sent_; }
  // True when `t` is the next Token of the Generate (any other is ignored).
  bool OnToken(const ipc::compute::Token& t, Clock::time_point now);
  // The Generate's Done: the LostTokensWarning ("" when the counts agree); nullopt for another request.
  std::optional<std::string> OnDone(const ipc::compute::Done& d);

  const std::vector<int32_t>& generated() const { return generated_; }
  const std::vector<ipc::compute::Token>& tokens() const { return tokens_; }  // with logprobs only
  const std::optional<ipc::compute::RunStats>& done() const { return done_; }
  const std::optional<ipc::compute::StopReason>& finish_reason() const { return finish_reason_; }
  Clock::time_point generate_time() const { return t_generate_; }
  double decode_seconds() const;            // first Token -> last Token
  // Generate sent -> the first Token's arrival here (nullopt: no Token came).
  std::optional<double> first_token_seconds() const;
  std::vector<double> token_seconds() const;  // between consecutive Tokens

 private:
  const bool keep_logprobs_;
  size_t prompt_sent_ = 0;
  bool sent_ = false;
  Clock::time_point t_generate_ = Clock::now();
  std::vector<int32_t> generated_;
  std::vector<ipc::compute::Token> tokens_;
  std::vector<Clock::time_point> arrivals_;
  std::optional<ipc::compute::RunStats> done_;
  std::optional<ipc::compute::StopReason> finish_reason_;
};

}  // namespace k3::launch
