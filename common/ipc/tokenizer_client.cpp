#include "common/ipc/tokenizer_client.h"

namespace k3::ipc {
namespace tk = tokenizer;

namespace {
// Failed.error in words, in front of the service's detail.
const char* ErrorKind(tk::Error e) {
  switch (e) {
    case tk::Error::kNone:
      return "failed";
    case tk::Error::kBadInput:
      return "bad input";
    case tk::Error::kUnknownId:
      return "unknown id";
    case tk::Error::kUnsupported:
      return "unsupported";
    case tk::Error::kTooLarge:
      return "too large";
  }
  return "failed";
}
}  // namespace

uint64_t TokenizerRequests::Send(const std::function<Encoded(uint64_t)>& make, Resend when) {
  const uint64_t id = next_id_++;
  Request r{make(id), when, Clock::now()};
  if (r.msg.payload.size() > kMaxTokenizerPayload) return 0;
  SendMessage(sock_, r.msg);
  pending_.emplace(id, std::move(r));
  return id;
}

bool TokenizerRequests::Answered(uint64_t id) { return pending_.erase(id) > 0; }

void TokenizerRequests::Forget(uint64_t id) { pending_.erase(id); }

void TokenizerRequests::Restarted() {
  const auto now = Clock::now();
  for (auto& [id, r] : pending_)
    if (r.when != Resend::kNever) {
      r.sent = now;
      SendMessage(sock_, r.msg);
    }
}

void TokenizerRequests::ResendStale(Clock::time_point now) {
  for (auto& [id, r] : pending_)
    if (r.when == Resend::kOnRestartOrTimeout && now - r.sent > kTokenizerResend) {
      r.sent = now;
      SendMessage(sock_, r.msg);
    }
}

TokenizerClient::TokenizerClient(zmq::context_t& ctx, const std::string& endpoint)
    : sock_(ctx, zmq::socket_type::dealer) {
  sock_.set(zmq::sockopt::linger, 0);
  Connect(sock_, endpoint);  // the service binds; ZeroMQ reconnects after a restart
}

void TokenizerClient::StartEncode(const std::string& text) {
  if (encode_id_ != 0) requests_.Forget(encode_id_);
  encode_id_ = requests_.Send([&](uint64_t id) { return Encode(tk::Encode{id, text, false}); },
                              TokenizerRequests::Resend::kOnRestart);
}

void TokenizerClient::PushIds(const std::vector<int32_t>& ids) {
  ids_.insert(ids_.end(), ids.begin(), ids.end());
  SendNextChunk();
}

void TokenizerClient::FinishStream() {
  finishing_ = true;
  SendNextChunk();
}

void TokenizerClient::SendNextChunk() {
  if (in_flight_ > 0 || in_flight_final_ || stream_done_ || !failure_.empty()) return;
  const size_t n = ids_.size() - acked_;
  if (n == 0 && !finishing_) return;
  if (stream_id_ == 0) stream_id_ = requests_.NewId();
  tk::Decode d{stream_id_, std::vector<int32_t>(ids_.begin() + static_cast<long>(acked_), ids_.end()), true,
               finishing_};
  in_flight_ = n;
  in_flight_final_ = finishing_;
  SendMessage(sock_, Encode(d));
}

std::string TokenizerClient::TakeNewText() {
  std::string out = text_.substr(printed_);
  printed_ = text_.size();
  return out;
}

void TokenizerClient::Drain(RejectCounter& rejects) {
  while (auto r = ReceiveVerified(sock_, false, DecodeTokenizer, Clock::now(), rejects)) {
    if (const auto* e = std::get_if<tk::EncodedIds>(&r->message)) {
      if (encode_id_ != 0 && e->request_id == encode_id_ && requests_.Answered(encode_id_)) {
        encoded_ = e->ids;
        encode_id_ = 0;
      }
    } else if (const auto* d = std::get_if<tk::Decoded>(&r->message)) {
      if (stream_id_ == 0 || d->request_id != stream_id_ || (in_flight_ == 0 && !in_flight_final_)) continue;
      // Bytes a previous stream already delivered come first after a restart: skip them.
      const size_t drop = std::min(skip_, d->text.size());
      skip_ -= drop;
      text_.append(d->text, drop);
      acked_ += in_flight_;
      in_flight_ = 0;
      if (in_flight_final_) stream_done_ = true;
      in_flight_final_ = false;
      SendNextChunk();
    } else if (const auto* f = std::get_if<tk::Failed>(&r->message)) {
      if (f->request_id != encode_id_ && f->request_id != stream_id_) continue;
      if (failure_.empty()) failure_ = std::string(ErrorKind(f->error)) + ": " + f->detail;
      if (encode_id_ != 0) requests_.Forget(encode_id_);
      encode_id_ = 0;
      in_flight_ = 0;
      in_flight_final_ = false;
    } else {
      ++rejects.rejected;  // requests flow only to the service
      rejects.last_reason = "tokenizer sent a request to the launcher";
    }
  }
}

void TokenizerClient::Resend() {
  requests_.Restarted();  // the pending encode, under its id
  if (stream_id_ == 0 || stream_done_ || !failure_.empty()) return;
  // A new stream replays every id; what was delivered already is skipped.
  stream_id_ = requests_.NewId();
  skip_ = text_.size();
  acked_ = 0;
  in_flight_ = 0;
  in_flight_final_ = false;
  SendNextChunk();
}

}  // namespace k3::ipc
