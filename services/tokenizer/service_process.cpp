#include "service_process.h"

#include <chrono>
#include <cstdio>
#include <optional>
#include <zmq.hpp>

#include "../../common/error.h"
#include "common/ipc/protocol.h"
#include "common/ipc/zmq_channel.h"
#include "common/run_main.h"
#include "service_core.h"
#include "common/service/service_shell.h"

namespace k3::tok {
namespace {

constexpr const char* kService = "tokenizer";
using Clock = std::chrono::steady_clock;

void ServeLoop(const Tokenizer& tok, svc::ControlLink& ctl, zmq::socket_t& sock) {
  TokenizerService core(tok);
  ipc::RejectCounter rejects;
  const auto t0 = Clock::now();
  double busy = 0;  // seconds spent handling requests (for the MB/s figure)
  auto stats = [&] {
    const ServiceCounters& c = core.counters();
    return std::vector<ipc::control::Stat>{
        {"requests", static_cast<double>(c.requests)},
        {"encoded_bytes", static_cast<double>(c.encoded_bytes)},
        {"decoded_ids", static_cast<double>(c.decoded_ids)},
        {"failed_requests", static_cast<double>(c.failed)},
        {"busy_seconds", busy},
        {"rejected_messages", static_cast<double>(rejects.rejected + c.rejected + ctl.rejects().rejected)}};
  };
  while (svc::WaitForWork(ctl, {sock}, std::chrono::milliseconds(200))) {
    while (auto r = ipc::ReceiveVerified(sock, true, ipc::DecodeTokenizer, Clock::now(), rejects)) {
      const auto h0 = Clock::now();
      std::optional<ipc::tokenizer::Message> reply = core.Handle(r->message);
      if (reply) ipc::SendMessage(sock, ipc::EncodeAny(*reply), {}, r->identity);
      busy += std::chrono::duration<double>(Clock::now() - h0).count();
    }
  }
  const ServiceCounters& c = core.counters();
  const uint64_t rejected = rejects.rejected + c.rejected + ctl.rejects().rejected;
  std::fprintf(stderr,
               "[tokenizer] stats: %llu requests, %.2f MB encoded, %llu ids decoded in %.2f s busy (%.1f s up), "
               "%llu rejected messages%s%s\n",
               static_cast<unsigned long long>(c.requests), static_cast<double>(c.encoded_bytes) / 1e6,
               static_cast<unsigned long long>(c.decoded_ids), busy,
               std::chrono::duration<double>(Clock::now() - t0).count(), static_cast<unsigned long long>(rejected),
               rejected ? " (last: " : "", rejected ? (rejects.last_reason + ")").c_str() : "");
  ctl.Stats(stats());
}

}  // namespace

int Serve(const ServeOptions& o) {
  svc::InstallStopSignals();
  zmq::context_t ctx(1);
  svc::ControlLink ctl(ctx, o.control, kService);
  return RunMain("k3-tokenizer", [&] {
    ctl.Hello();
    const auto t0 = Clock::now();
    const Tokenizer tok = Tokenizer::Load(o.vocab);
    const double load_s = std::chrono::duration<double>(Clock::now() - t0).count();
    zmq::socket_t sock(ctx, zmq::socket_type::router);
    sock.set(zmq::sockopt::linger, 0);
    ipc::BindPrivate(sock, o.bind);
    ctl.Ready({{"vocab_ids", static_cast<double>(tok.vocab().id_limit())}, {"load_seconds", load_s}});
    std::fprintf(stderr, "[tokenizer] %u ids loaded from %s in %.2f s; serving %s\n", tok.vocab().id_limit(),
                 o.vocab.c_str(), load_s, o.bind.c_str());
    ServeLoop(tok, ctl, sock);
    return svc::StopRequested() ? kExitInterrupted : kExitOk;
  }, [&](ExitCode code, const std::string& why) { ctl.Dead(code, why); });
}

}  // namespace k3::tok
