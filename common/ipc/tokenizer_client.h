// The client side of the tokenizer protocol (a DEALER on the k3-tokenizer service's endpoint),
// for k3-launch's run and chat and for k3-server. Replies are matched by request_id, so a
// stale reply (from before a restart, or a resend's second answer) is ignored.
//
// TokenizerRequests: requests answered once each (Encode, RenderChat, one-shot Decode). A
// restarted tokenizer loses what it held, so a pending request goes again under its id: on
// the tokenizer's Ready after a restart (Restarted()), and when unanswered for
// kTokenizerResend (ResendStale()), as its `Resend` says.
//
// TokenizerClient (k3-launch's run): encode the prompt, and decode generated ids as a stream
// so stdout never receives half a UTF-8 character. At most one chunk is in flight; ids
// generated meanwhile wait for the next chunk. Restart: the service's stream state dies with
// it. Resend() re-sends the in-flight encode, or starts a new stream holding every id so far
// and drops the bytes already delivered (a stream's output is the same however its ids were
// chunked, so the new output extends the old one).
//
// Thread-safety: none; one loop owns each.
#pragma once
#include <zmq.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/ipc/protocol.h"
#include "common/ipc/zmq_channel.h"

namespace k3::ipc {

constexpr auto kTokenizerResend = std::chrono::seconds(5);  // unanswered this long: sent again

class TokenizerRequests {
 public:
  enum class Resend { kNever, kOnRestart, kOnRestartOrTimeout };
  explicit TokenizerRequests(zmq::socket_t& sock) : sock_(sock) {}

  uint64_t NewId() { return next_id_++; }  // an id for a request kept elsewhere (a stream)
  // Sends make(id) under a new id and keeps it pending until Answered(id); returns the id, or 0
  // (nothing sent) when the message is over kMaxTokenizerPayload: the tokenizer would drop it
  // unanswered.
  uint64_t Send(const std::function<Encoded(uint64_t)>& make, Resend when);
  // A reply for `id` arrived: true when it answers a pending request (no longer pending).
  bool Answered(uint64_t id);
  void Forget(uint64_t id);  // no longer wanted
  bool Pending(uint64_t id) const { return pending_.count(id) > 0; }
  void Restarted();                 // the tokenizer is back after a restart
  void ResendStale(Clock::time_point now);

 private:
  struct Request {
    Encoded msg;
    Resend when;
    Clock::time_point sent;
  };
  zmq::socket_t& sock_;
  uint64_t next_id_ = 1;
  std::map<uint64_t, Request> pending_;
};

class TokenizerClient {
 public:
  TokenizerClient(zmq::context_t& ctx, const std::string& endpoint);
  TokenizerClient(const TokenizerClient&) = delete;
  TokenizerClient& operator=(const TokenizerClient&) = delete;
  zmq::socket_t& socket() { return sock_; }

  void StartEncode(const std::string& text);
  // The prompt's ids once EncodedIds arrived (nullopt before).
  const std::optional<std::vector<int32_t>>& encoded() const { return encoded_; }

  void PushIds(const std::vector<int32_t>& ids);  // generated ids, in order
  void FinishStream();                            // no more ids: flush when idle
  bool stream_done() const { return stream_done_; }
  // Text complete since the last call (never ends inside a UTF-8 character, except at the
  // very end of the stream).
  std::string TakeNewText();
  const std::string& text() const { return text_; }

  // First Failed reply ("" while none); the request is not retried.
  const std::string& failure() const { return failure_; }

  void Drain(RejectCounter& rejects);  // handle every waiting reply
  void Resend();                       // after the service restarted

 private:
  void SendNextChunk();

  zmq::socket_t sock_;
  TokenizerRequests requests_{sock_};
  // encode
  uint64_t encode_id_ = 0;  // 0: no encode in flight
  std::optional<std::vector<int32_t>> encoded_;
  // stream decode
  uint64_t stream_id_ = 0;
  std::vector<int32_t> ids_;     // every generated id
  size_t acked_ = 0;             // ids whose reply arrived
  size_t in_flight_ = 0;         // ids in the chunk awaiting its reply (0: idle)
  bool in_flight_final_ = false;
  bool finishing_ = false, stream_done_ = false;
  size_t skip_ = 0;              // bytes of the next replies already delivered before a restart
  std::string text_;
  size_t printed_ = 0;
  std::string failure_;
};

}  // namespace k3::ipc
