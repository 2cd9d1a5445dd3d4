// WakePair: how a worker thread tells a service loop "completions are waiting": an inproc
// ZeroMQ PAIR whose receiving end the loop polls next to its other sockets. The completions
// themselves live in the worker's own queue; the messages only wake the loop.
//
// Thread-safety: Drain and socket() from the loop thread; Signal from one worker thread at a
// time (callers with several workers hold their queue's lock while signalling).
#pragma once
#include <zmq.hpp>

#include <cerrno>
#include <string>

namespace k3::svc {

class WakePair {
 public:
  // Binds "inproc://<name>" on `ctx` and connects the sending end.
  WakePair(zmq::context_t& ctx, const std::string& name)
      : rx_(ctx, zmq::socket_type::pair), tx_(ctx, zmq::socket_type::pair) {
    rx_.bind("inproc://" + name);
    tx_.connect("inproc://" + name);
  }
  zmq::socket_t& socket() { return rx_; }

  // Takes every pending wake-up; a signal interrupting a receive is retried.
  void Drain() {
    zmq::message_t m;
    for (;;) {
      try {
        if (!rx_.recv(m, zmq::recv_flags::dontwait)) return;
      } catch (const zmq::error_t& e) {
        if (e.num() != EINTR) throw;
      }
    }
  }

  void Signal() {
    for (;;) {
      try {
        tx_.send(zmq::str_buffer(""), zmq::send_flags::dontwait);
      } catch (const zmq::error_t& e) {
        if (e.num() == EINTR) continue;  // a signal: the wake-up must still be sent
        // The PAIR queue is full only if the loop stopped draining; the data is queued anyway.
      }
      return;
    }
  }

 private:
  zmq::socket_t rx_;
  zmq::socket_t tx_;
};

}  // namespace k3::svc
