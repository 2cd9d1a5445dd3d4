#include "common/ipc/zmq_channel.h"

#include <algorithm>

#include "common/error.h"

namespace k3::ipc {

namespace {

// [identity] + kind + payload, then the bulk frame when there is one.
void SendFrames(zmq::socket_t& s, const Encoded& m, zmq::message_t* bulk, const std::string& identity) {
  try {
    const auto kind = m.kind.bytes();
    if (!identity.empty()) s.send(zmq::buffer(identity), zmq::send_flags::sndmore);
    s.send(zmq::buffer(kind.data(), kind.size()), zmq::send_flags::sndmore);
    s.send(zmq::buffer(m.payload.data(), m.payload.size()), bulk ? zmq::send_flags::sndmore : zmq::send_flags::none);
    if (bulk) s.send(*bulk, zmq::send_flags::none);
  } catch (const zmq::error_t& e) {
    throw RuntimeFailure("zmq send " + KindName(m.kind) + ": " + e.what());
  }
}

}  // namespace

void SendMessage(zmq::socket_t& s, const Encoded& m, std::span<const uint8_t> bulk, const std::string& identity) {
  if (bulk.empty()) return SendFrames(s, m, nullptr, identity);
  zmq::message_t frame(bulk.data(), bulk.size());  // a copy: the caller keeps its bytes
  SendFrames(s, m, &frame, identity);
}

void SendMessageMoving(zmq::socket_t& s, const Encoded& m, zmq::message_t&& bulk, const std::string& identity) {
  SendFrames(s, m, &bulk, identity);
}

bool PollIn(zmq::socket_t& s, Clock::time_point deadline) {
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    zmq::pollitem_t item{s.handle(), 0, ZMQ_POLLIN, 0};
    try {
      int n = zmq::poll(&item, 1, std::max(left, std::chrono::milliseconds(0)));
      if (n > 0) return true;
    } catch (const zmq::error_t& e) {
      if (e.num() != EINTR) throw RuntimeFailure(std::string("zmq poll: ") + e.what());
    }
    if (Clock::now() >= deadline) return false;
  }
}

std::optional<RawMessage> RecvRaw(zmq::socket_t& s, bool router) {
  RawMessage raw;
  try {
    zmq::message_t first;
    if (!s.recv(first, zmq::recv_flags::dontwait)) return std::nullopt;
    bool more = first.more();
    if (router) {
      raw.identity.assign(static_cast<const char*>(first.data()), first.size());
    } else {
      raw.frames.push_back(std::move(first));
    }
    // The rest of a multipart message is already here: ZeroMQ delivers parts atomically.
    while (more) {
      zmq::message_t part;
      (void)s.recv(part, zmq::recv_flags::none);
      more = part.more();
      raw.frames.push_back(std::move(part));
    }
  } catch (const zmq::error_t& e) {
    throw RuntimeFailure(std::string("zmq recv: ") + e.what());
  }
  return raw;
}

}  // namespace k3::ipc
