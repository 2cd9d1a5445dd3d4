#include "service_process.h"

#include <chrono>
#include <cstdio>
#include <optional>
#include <string>
#include <variant>
#include <vector>
#include <zmq.hpp>

#include "common/error.h"
#include "common/ipc/protocol.h"
#include "common/ipc/zmq_channel.h"
#include "common/service/service_shell.h"
#include "service_core.h"
#include "tokenizer.h"

namespace k3::tok {
namespace {

constexpr const char* kService = "tokenizer";
using Clock = std::chrono::steady_clock;
using ipc::control::Stat;

// The answer as it goes out. One the receiver would reject for its size (the ids of a prompt
// of several MiB) is a Failed{TooLarge} instead: a rejected message is never answered, and
// the request would wait for its deadline.
ipc::Encoded WithinLimit(const ipc::tokenizer::Message& reply) {
  ipc::Encoded out = ipc::EncodeAny(reply);
  if (out.payload.size() <= ipc::kMaxTokenizerPayload) return out;
  const uint64_t id = std::visit([](const auto& m) { return m.request_id; }, reply);
  const auto* ids = std::get_if<ipc::tokenizer::EncodedIds>(&reply);
  return ipc::Encode(ipc::tokenizer::Failed{
      id, ipc::tokenizer::Error::kTooLarge,
      (ids ? "the prompt encodes to " + std::to_string(ids->ids.size()) + " ids, whose message is "
           : std::string("the answer is ")) +
          std::to_string(out.payload.size() >> 20) + " MiB, over the message limit of " +
          std::to_string(ipc::kMaxTokenizerPayload >> 20) + " MiB"});
}

// The service the shell's RunServiceLifecycle drives (common/service/service_shell.h): the
// vocabulary and the socket around the pure TokenizerService.
class TokenizerProcess {
 public:
  TokenizerProcess(const ServeOptions& o, zmq::context_t& ctx, svc::ControlLink& ctl)
      : o_(o), ctx_(ctx), ctl_(ctl) {}

  void Start() {
    const auto t0 = Clock::now();
    tok_.emplace(Tokenizer::Load(o_.vocab));
    load_seconds_ = std::chrono::duration<double>(Clock::now() - t0).count();
    sock_.emplace(ctx_, zmq::socket_type::router);
    sock_->set(zmq::sockopt::linger, 0);
    ipc::BindPrivate(*sock_, o_.bind);
    core_.emplace(*tok_);
  }

  std::vector<Stat> StartStats() const {
    return {{"vocab_ids", static_cast<double>(tok_->vocab().id_limit())}, {"load_seconds", load_seconds_}};
  }

  void Serve() {
    std::fprintf(stderr, "[tokenizer] %u ids loaded from %s in %.2f s; serving %s\n", tok_->vocab().id_limit(),
                 o_.vocab.c_str(), load_seconds_, o_.bind.c_str());
    t_serve_ = Clock::now();
    while (svc::WaitForWork(ctl_, {*sock_}, std::chrono::milliseconds(200))) {
      while (auto r = ipc::ReceiveVerified(*sock_, true, ipc::DecodeTokenizer, Clock::now(), rejects_)) {
        const auto h0 = Clock::now();
        std::optional<ipc::tokenizer::Message> reply = core_->Handle(r->message);
        if (reply) ipc::SendMessage(*sock_, WithinLimit(*reply), {}, r->identity);
        busy_ += std::chrono::duration<double>(Clock::now() - h0).count();
      }
    }
  }

  void Finish() {
    const ServiceCounters& c = core_->counters();
    const uint64_t rejected = Rejected();
    std::fprintf(stderr,
                 "[tokenizer] stats: %llu requests, %.2f MB encoded, %llu ids decoded in %.2f s busy (%.1f s up), "
                 "%llu rejected messages%s%s\n",
                 static_cast<unsigned long long>(c.requests), static_cast<double>(c.encoded_bytes) / 1e6,
                 static_cast<unsigned long long>(c.decoded_ids), busy_,
                 std::chrono::duration<double>(Clock::now() - t_serve_).count(),
                 static_cast<unsigned long long>(rejected), rejected ? " (last: " : "",
                 rejected ? (rejects_.last_reason + ")").c_str() : "");
  }

  std::vector<Stat> FinalStats() const {
    const ServiceCounters& c = core_->counters();
    return {{"requests", static_cast<double>(c.requests)},
            {"encoded_bytes", static_cast<double>(c.encoded_bytes)},
            {"decoded_ids", static_cast<double>(c.decoded_ids)},
            {"failed_requests", static_cast<double>(c.failed)},
            {"busy_seconds", busy_},
            {"rejected_messages", static_cast<double>(Rejected())}};
  }

 private:
  uint64_t Rejected() const { return rejects_.rejected + core_->counters().rejected + ctl_.rejects().rejected; }

  const ServeOptions& o_;
  zmq::context_t& ctx_;
  svc::ControlLink& ctl_;
  std::optional<Tokenizer> tok_;
  std::optional<zmq::socket_t> sock_;
  std::optional<TokenizerService> core_;  // refers to *tok_
  ipc::RejectCounter rejects_;
  double load_seconds_ = 0;
  double busy_ = 0;  // seconds spent handling requests (for the MB/s figure)
  Clock::time_point t_serve_;
};

}  // namespace

int Serve(const ServeOptions& o) { return svc::RunService<TokenizerProcess>(o.control, kService, o); }

}  // namespace k3::tok
