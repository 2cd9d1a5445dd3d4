// k3-launch's side of the tokenizer protocol (DEALER on ipc://RUN/tokenizer): encode the
// prompt, and decode generated ids as a stream so stdout never receives half a UTF-8
// character. At most one request is in flight; ids generated meanwhile wait for the next
// chunk. Replies are matched by request_id, so a stale reply (e.g. from before a restart) is
// ignored.
//
// Restart: the service's stream state dies with it. Resend() re-sends the in-flight encode,
// or starts a new stream holding every id so far and drops the bytes already delivered (a
// stream's output is the same however its ids were chunked, so the new output extends the
// old one).
//
// Thread-safety: none; the launcher's loop owns it.
#pragma once
#include <zmq.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/ipc/zmq_channel.h"

namespace k3::launch {

class TokenizerClient {
 public:
  TokenizerClient(zmq::context_t& ctx, const std::string& endpoint);
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

  void Drain(ipc::RejectCounter& rejects);  // handle every waiting reply
  void Resend();                            // after the service restarted

 private:
  void SendNextChunk();

  zmq::socket_t sock_;
  uint64_t next_id_ = 1;
  // encode
  std::string prompt_;
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

}  // namespace k3::launch
