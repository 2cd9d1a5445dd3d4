// Thin helpers over cppzmq for k3 messages: [identity] + kind frame + payload [+ bulk frame].
// Receiving always verifies (protocol.h); a malformed message is counted and skipped, and
// the receiver keeps waiting for the next good one until its deadline.
//
// Thread-safety: like the zmq::socket_t they wrap, use each socket from one thread.
#pragma once
#include <zmq.hpp>

#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/ipc/protocol.h"

namespace k3::ipc {

using Clock = std::chrono::steady_clock;

// Sends kind + payload (+ `bulk` as one more frame when non-empty). On a ROUTER socket pass
// the peer's identity; it is sent first. Throws k3::Error(kExitRuntime) if ZeroMQ fails.
void SendMessage(zmq::socket_t& s, const Encoded& m, std::span<const uint8_t> bulk = {},
                 const std::string& identity = {});
// The same with a bulk frame ZeroMQ takes over without copying (large payloads).
void SendMessageMoving(zmq::socket_t& s, const Encoded& m, zmq::message_t&& bulk, const std::string& identity);

// Waits until `s` has a message or `deadline` passes. True when readable.
bool PollIn(zmq::socket_t& s, Clock::time_point deadline);

// zmq::poll that treats a signal as a wake-up with nothing ready (returns 0) instead of an
// error: a signal that is not a stop request must never end a process. Every blocking ZeroMQ
// call in k3 goes through here or through the helpers above (which retry on EINTR).
int Poll(zmq::pollitem_t* items, size_t n, std::chrono::milliseconds timeout);

// A run's private endpoint base in the Linux abstract socket namespace:
// "ipc://@k3-<pid>-<16 random hex digits>". Endpoints are base + "/control" etc. Abstract
// sockets have no file: nothing is left behind when a run dies, and no file or directory made
// by someone else can block a launch; the random part makes the names unguessable in advance.
std::string PrivateEndpointBase();
// Binds `s` to `endpoint`; on an abstract ipc endpoint ("ipc://@...") only peers of this
// user id may connect (abstract sockets have no file permissions to do that).
// Retried when a signal interrupts it (ZeroMQ's bind and connect first look at the socket's
// command pipe, and that wait can be interrupted: a stop-unrelated signal must not fail them).
void BindPrivate(zmq::socket_t& s, const std::string& endpoint);
// s.connect(endpoint), retried when a signal interrupts it; other errors throw zmq::error_t.
void Connect(zmq::socket_t& s, const std::string& endpoint);

// One verified message, with the sender's identity (ROUTER sockets) and the bulk frame, if any.
template <class Msg>
struct Received {
  std::string identity;
  Msg message;
  zmq::message_t bulk_frame;  // empty when the message had none; kept as received (no copy)
  std::string user_id;        // ROUTER with CURVE: the sender's Z85 public key (ZAP user id)
  int source_fd = -1;         // ROUTER: the socket ZeroMQ read it from (ZMQ_SRCFD), -1 if none
  std::span<const uint8_t> bulk() const {
    return {static_cast<const uint8_t*>(bulk_frame.data()), bulk_frame.size()};
  }
};

// Frames of one multipart message, before verification.
struct RawMessage {
  std::string identity;
  std::vector<zmq::message_t> frames;
  std::string user_id;  // ROUTER only: the "User-Id" property (ZAP), empty without one
  int source_fd = -1;   // ROUTER only: ZMQ_SRCFD of the first frame, -1 where the transport has none
};
// Receives all parts of one message without blocking; nullopt if none is waiting.
std::optional<RawMessage> RecvRaw(zmq::socket_t& s, bool router);

// Counts what a receiver threw away, and why the last one was thrown away.
struct RejectCounter {
  uint64_t rejected = 0;
  std::string last_reason;
};

// Receives the next message that decodes, until `deadline`. Malformed messages (wrong frame
// count, bad kind, failed verification) bump `rejects` and are skipped. nullopt on timeout.
// `decode` is DecodeControl / DecodeWeights / DecodeExperts / DecodeCompute.
template <class Msg>
std::optional<Received<Msg>> ReceiveVerified(zmq::socket_t& s, bool router,
                                             Result<Msg> (*decode)(std::span<const uint8_t>, std::span<const uint8_t>),
                                             Clock::time_point deadline, RejectCounter& rejects) {
  for (;;) {
    std::optional<RawMessage> raw = RecvRaw(s, router);
    if (!raw) {
      if (!PollIn(s, deadline)) return std::nullopt;
      continue;
    }
    auto& f = raw->frames;
    if (f.size() < 2 || f.size() > 3) {
      ++rejects.rejected;
      rejects.last_reason = "message has " + std::to_string(f.size()) + " frames, want 2 or 3";
      continue;
    }
    Result<Msg> r = decode({static_cast<const uint8_t*>(f[0].data()), f[0].size()},
                           {static_cast<const uint8_t*>(f[1].data()), f[1].size()});
    if (!r.ok()) {
      ++rejects.rejected;
      rejects.last_reason = r.error();
      continue;
    }
    Received<Msg> out{std::move(raw->identity), std::move(r).value(), {}, std::move(raw->user_id), raw->source_fd};
    if (f.size() == 3) out.bulk_frame = std::move(f[2]);
    return out;
  }
}

}  // namespace k3::ipc
