#include "common/ipc/zmq_channel.h"

#include <sys/random.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "common/error.h"

namespace k3::ipc {

namespace {

// One part, retried when a signal interrupts it (ZeroMQ then has not taken the part, so
// sending it again sends it once). Other errors throw zmq::error_t.
template <class Part>
void SendPart(zmq::socket_t& s, Part&& part, zmq::send_flags flags) {
  for (;;) {
    try {
      (void)s.send(std::forward<Part>(part), flags);
      return;
    } catch (const zmq::error_t& e) {
      if (e.num() != EINTR) throw;
    }
  }
}

// recv that retries when a signal interrupts it (also a non-blocking one: ZeroMQ may look at
// its command pipe first, and that poll can be interrupted).
bool RecvPart(zmq::socket_t& s, zmq::message_t& m, zmq::recv_flags flags) {
  for (;;) {
    try {
      return s.recv(m, flags).has_value();
    } catch (const zmq::error_t& e) {
      if (e.num() != EINTR) throw;
    }
  }
}

// [identity] + kind + payload, then the bulk frame when there is one.
void SendFrames(zmq::socket_t& s, const Encoded& m, zmq::message_t* bulk, const std::string& identity) {
  try {
    const auto kind = m.kind.bytes();
    if (!identity.empty()) SendPart(s, zmq::buffer(identity), zmq::send_flags::sndmore);
    SendPart(s, zmq::buffer(kind.data(), kind.size()), zmq::send_flags::sndmore);
    SendPart(s, zmq::buffer(m.payload.data(), m.payload.size()), bulk ? zmq::send_flags::sndmore : zmq::send_flags::none);
    if (bulk) SendPart(s, *bulk, zmq::send_flags::none);
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

int Poll(zmq::pollitem_t* items, size_t n, std::chrono::milliseconds timeout) {
  try {
    return zmq::poll(items, n, timeout);
  } catch (const zmq::error_t& e) {
    if (e.num() != EINTR) throw RuntimeFailure(std::string("zmq poll: ") + e.what());
    for (size_t i = 0; i < n; ++i) items[i].revents = 0;
    return 0;
  }
}

bool PollIn(zmq::socket_t& s, Clock::time_point deadline) {
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    zmq::pollitem_t item{s.handle(), 0, ZMQ_POLLIN, 0};
    if (Poll(&item, 1, std::max(left, std::chrono::milliseconds(0))) > 0) return true;
    if (Clock::now() >= deadline) return false;
  }
}

std::string PrivateEndpointBase() {
  uint64_t r = 0;
  for (size_t got = 0; got < sizeof r;) {
    const ssize_t n = ::getrandom(reinterpret_cast<char*>(&r) + got, sizeof r - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw RuntimeFailure(std::string("getrandom: ") + std::strerror(errno));
    got += static_cast<size_t>(n);
  }
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(r));
  return "ipc://@k3-" + std::to_string(::getpid()) + "-" + hex;
}

void BindPrivate(zmq::socket_t& s, const std::string& endpoint) {
  if (endpoint.rfind("ipc://@", 0) == 0) {
    const int uid = static_cast<int>(::getuid());
    // Linux peer credentials; a libzmq without them refuses the option: then fail rather
    // than serve other users.
    if (zmq_setsockopt(s.handle(), ZMQ_IPC_FILTER_UID, &uid, sizeof uid) != 0)
      throw RuntimeFailure("cannot bind " + endpoint + ": peer uid filter: " + zmq_strerror(zmq_errno()));
  }
  for (;;) {
    try {
      s.bind(endpoint);
      return;
    } catch (const zmq::error_t& e) {
      if (e.num() != EINTR) throw RuntimeFailure("cannot bind " + endpoint + ": " + e.what());
    }
  }
}

void Connect(zmq::socket_t& s, const std::string& endpoint) {
  for (;;) {
    try {
      s.connect(endpoint);
      return;
    } catch (const zmq::error_t& e) {
      if (e.num() != EINTR) throw;
    }
  }
}

std::optional<RawMessage> RecvRaw(zmq::socket_t& s, bool router) {
  RawMessage raw;
  try {
    zmq::message_t first;
    if (!RecvPart(s, first, zmq::recv_flags::dontwait)) return std::nullopt;
    bool more = first.more();
    if (router) {
      raw.identity.assign(static_cast<const char*>(first.data()), first.size());
    } else {
      raw.frames.push_back(std::move(first));
    }
    // The rest of a multipart message is already here: ZeroMQ delivers parts atomically.
    while (more) {
      zmq::message_t part;
      (void)RecvPart(s, part, zmq::recv_flags::none);
      more = part.more();
      raw.frames.push_back(std::move(part));
    }
    if (router && !raw.frames.empty()) {
      if (const char* uid = zmq_msg_gets(raw.frames[0].handle(), "User-Id")) raw.user_id = uid;
      raw.source_fd = zmq_msg_get(raw.frames[0].handle(), ZMQ_SRCFD);
    }
  } catch (const zmq::error_t& e) {
    throw RuntimeFailure(std::string("zmq recv: ") + e.what());
  }
  return raw;
}

}  // namespace k3::ipc
