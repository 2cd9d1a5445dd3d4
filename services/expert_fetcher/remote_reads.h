// The expert fetcher's reads when its experts come from k3-expert-servers on other machines
// (`--remote EP`, repeatable): one ExpertRequest per expert, answered by an ExpertBytes header
// plus a bulk frame whose length and XXH3 are checked before the bytes go into the slot.
//
// Several servers (docs/pipeline.md "Several expert servers"): every expert has a home server,
// HomeServer(layer, expert, n), and the others as fallbacks. A read goes to the live server
// with the fewest reads out (and fewer than `in_flight`), its home when the home is among
// them: idle servers all answer their home's experts, and a burst of misses spreads evenly
// over every server, so that their bandwidths add up. A server that has reads out
// and sends nothing for `drop_after` is dropped for the rest of the run: its reads go to the
// others, unchanged. An error reply, bytes that fail their check, or no answer to one read
// within `give_up` (from a server that answers others) send that read to a server it has not
// tried yet. The last live server is never dropped: as with a single server, a
// request without an answer is sent again every `resend`, and after `give_up` the read fails
// with one line naming every server (the fetcher then reports ReadFailed to compute, which
// ends the run). At most `in_flight` experts per server are asked for at a time (the rest wait
// here), so the frames received but not yet copied stay within the plan's `remote-frames`
// region (in_flight x servers experts). Used from the fetcher's loop thread only.
//
// With CURVE keys (common/ipc/curve.h) a HandshakeWatch per server sees a refused key at once:
// that server is dropped like a silent one, and when it is the last, every read fails with
// its reason instead of timing out.
#pragma once
#include <zmq.hpp>

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/ipc/curve.h"
#include "common/ipc/zmq_channel.h"
#include "common/service/read_worker.h"

namespace k3::svc {

// What one server did in this run (the fetcher's Stats "server_<i>_*", the launcher's report).
struct RemoteServerStats {
  std::string endpoint;
  uint64_t experts = 0;   // experts it delivered (checked and copied)
  uint64_t bytes = 0;     // their bytes
  double seconds = 0;     // time it had reads out
  uint64_t failures = 0;  // error replies and bytes that failed their check
  uint64_t resends = 0;   // requests sent again after `resend` without an answer
  uint64_t moved = 0;     // reads given to another server when it was dropped
  bool dropped = false;   // silent for `drop_after` with reads out: not asked again
};

struct RemoteReadsOptions {
  int in_flight = 4;  // per server
  std::chrono::milliseconds resend{2000};
  std::chrono::milliseconds give_up{30000};
  std::chrono::milliseconds drop_after{10000};
  // CURVE keys: none (no keys), one for every server, or one per server in endpoint order.
  std::vector<ipc::CurveClientKeys> curve;
};

class RemoteReads {
 public:
  static constexpr size_t kMaxServers = 64;  // a read's tried servers are bits of a uint64_t
  RemoteReads(zmq::context_t& ctx, const std::vector<std::string>& endpoints, const RemoteReadsOptions& o);
  // The expert's home among n servers: a stable function of (layer, expert) alone.
  static size_t HomeServer(int layer, int expert, size_t n);
  // One socket per server, for the fetcher's poll.
  std::vector<zmq::socket_ref> sockets();
  // Asks for expert (layer, expert); its `length` bytes go to `dst`; `tag` comes back in ReadDone.
  void Submit(uint64_t tag, int layer, int expert, uint8_t* dst, uint64_t length);
  // Takes what has arrived (never blocks); re-sends, moves or gives up on late answers.
  std::vector<ReadDone> TakeCompleted();
  size_t pending() const;
  uint64_t resends() const;
  std::vector<RemoteServerStats> stats() const;  // in --remote order
  const ipc::RejectCounter& rejects() const { return rejects_; }

 private:
  struct Read {
    uint64_t tag = 0;
    int layer = 0, expert = 0;
    uint8_t* dst = nullptr;
    uint64_t length = 0;
    ipc::Clock::time_point first, last;  // first and latest send to its current server
    uint64_t tried = 0;                  // servers that failed this read (bit i = server i)
    std::string error;                   // the latest failure, for when no server is left
    bool corrupt = false;
  };
  struct Server {
    zmq::socket_t sock;
    std::map<uint64_t, Read> pending;  // asked for, by request id
    ipc::Clock::time_point heard;      // latest answer, or the send that ended an idle spell
    ipc::Clock::time_point busy_since;  // start of the current spell with reads out
    bool busy = false;
    RemoteServerStats st;
    std::unique_ptr<ipc::HandshakeWatch> watch;  // watches `sock`, which must not move after it is made
    std::optional<std::string> refused;          // the server refused this client: why
  };
  // The one place a server's socket is made and connected (socket options such as keys go here).
  zmq::socket_t Connect(zmq::context_t& ctx, const std::string& endpoint, const ipc::CurveClientKeys* curve);
  // The one place a read's bytes, which passed the length and XXH3 check, are handed on into
  // the slot; `s.st.endpoint` names where they came from (checks of the bytes go here).
  ReadDone Deliver(Server& s, const Read& r, std::span<const uint8_t> bytes);
  void Send(size_t server, uint64_t id, const Read& r);
  void SendWaiting(std::vector<ReadDone>& done);  // asks for waiting reads where a server has room
  void Receive(size_t server, std::vector<ReadDone>& done);
  void Retry(size_t server, Read r, const std::string& error, bool corrupt);  // another server, please
  void Drop(size_t server, const std::string& why);
  void Idle(Server& s, ipc::Clock::time_point now);  // pending just became empty
  std::string GiveUpMessage(size_t server) const;
  size_t Alive() const;

  std::vector<Server> servers_;
  size_t in_flight_;
  std::chrono::milliseconds resend_, give_up_, drop_after_;
  std::deque<Read> waiting_;  // not asked for yet, or taken from a dropped or failing server
  std::vector<ReadDone> failed_;  // failures found by Submit, for the next TakeCompleted
  uint64_t next_id_ = 1;
  ipc::RejectCounter rejects_;
};

}  // namespace k3::svc
