// The expert fetcher's reads when its experts come from a k3-expert-server on another machine
// (`--remote EP`): one ExpertRequest per expert, answered by an ExpertBytes header plus a bulk
// frame whose length and XXH3 are checked before the bytes go into the slot. ZeroMQ reconnects
// on its own; a request without an answer is sent again every `resend`, and after `give_up`
// the read fails with a one-line error (the fetcher then reports ReadFailed to compute, which
// ends the run). At most `in_flight` experts are asked for at a time (the rest wait here), so
// the frames received but not yet copied stay within the plan's `remote-frames` region. Used
// from the fetcher's loop thread only. With CURVE keys (common/ipc/curve.h) a HandshakeWatch
// sees a refused key at once: every read then fails with its reason instead of timing out.
#pragma once
#include <zmq.hpp>

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/ipc/curve.h"
#include "common/ipc/zmq_channel.h"
#include "common/service/read_worker.h"

namespace k3::svc {

class RemoteReads {
 public:
  RemoteReads(zmq::context_t& ctx, const std::string& endpoint, int in_flight = 4,
              std::chrono::milliseconds resend = std::chrono::milliseconds(2000),
              std::chrono::milliseconds give_up = std::chrono::milliseconds(30000),
              const std::optional<ipc::CurveClientKeys>& curve = std::nullopt);
  zmq::socket_t& socket() { return sock_; }
  // Asks for expert (layer, expert); its `length` bytes go to `dst`; `tag` comes back in ReadDone.
  void Submit(uint64_t tag, int layer, int expert, uint8_t* dst, uint64_t length);
  // Takes what has arrived (never blocks), re-sends or gives up on late answers.
  std::vector<ReadDone> TakeCompleted();
  size_t pending() const { return pending_.size() + waiting_.size(); }
  uint64_t resends() const { return resends_; }
  const ipc::RejectCounter& rejects() const { return rejects_; }

 private:
  struct Read {
    uint64_t tag = 0;
    int layer = 0, expert = 0;
    uint8_t* dst = nullptr;
    uint64_t length = 0;
    ipc::Clock::time_point first, last;  // first and latest send
  };
  void Send(uint64_t id, const Read& r);
  void SendWaiting();  // asks for waiting reads while fewer than in_flight_ are out

  std::string endpoint_;
  zmq::socket_t sock_;
  std::optional<ipc::HandshakeWatch> watch_;  // after sock_: destroyed before it
  std::optional<std::string> refused_;        // the server refused this client: why
  size_t in_flight_;
  std::chrono::milliseconds resend_, give_up_;
  std::map<uint64_t, Read> pending_;  // asked for, by request id
  std::deque<Read> waiting_;          // not asked for yet
  uint64_t next_id_ = 1, resends_ = 0;
  ipc::RejectCounter rejects_;
};

}  // namespace k3::svc
