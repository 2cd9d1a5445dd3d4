// The tokenizer service's pure core: one tokenizer-protocol request in, one reply out. No
// sockets here (service_process.cpp is the process shell around it), so it is unit-testable.
//
// Streaming decode keeps one StreamDecoder per request_id, so a stream's replies never end
// inside a UTF-8 character; `final` flushes and forgets the stream. At most kMaxStreams
// streams are kept; opening one more forgets the oldest (a requester that lost its stream,
// e.g. after a service restart, starts a new one with every id so far).
//
// Thread-safety: none; the service thread owns it.
#pragma once
#include <cstdint>
#include <deque>
#include <map>
#include <optional>

#include "common/ipc/messages.h"
#include "tokenizer.h"

namespace k3::tok {

struct ServiceCounters {
  uint64_t requests = 0;        // requests answered (EncodedIds, Decoded or Failed)
  uint64_t encoded_bytes = 0;   // text bytes encoded (Encode + RenderChat history)
  uint64_t decoded_ids = 0;     // ids decoded
  uint64_t failed = 0;          // requests answered with Failed
  uint64_t rejected = 0;        // well-formed messages a requester must not send (replies)
};

class TokenizerService {
 public:
  static constexpr size_t kMaxStreams = 64;

  explicit TokenizerService(const Tokenizer& tok) : tok_(tok) {}

  // The reply to `m`; nullopt (and `rejected` counted) for messages only the service sends.
  std::optional<ipc::tokenizer::Message> Handle(const ipc::tokenizer::Message& m);

  const ServiceCounters& counters() const { return counters_; }
  size_t open_streams() const { return streams_.size(); }

 private:
  ipc::tokenizer::Message OnEncode(const ipc::tokenizer::Encode& m);
  ipc::tokenizer::Message OnDecode(const ipc::tokenizer::Decode& m);
  ipc::tokenizer::Message OnRenderChat(const ipc::tokenizer::RenderChat& m);
  StreamDecoder& Stream(uint64_t id);

  const Tokenizer& tok_;
  std::map<uint64_t, StreamDecoder> streams_;
  std::deque<uint64_t> stream_order_;  // opening order, for forgetting the oldest
  ServiceCounters counters_;
};

}  // namespace k3::tok
