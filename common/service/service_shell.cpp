#include "common/service/service_shell.h"

#include <CLI/CLI.hpp>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <iostream>

#include "common/stdout_writer.h"

namespace k3::svc {
namespace {
std::atomic<bool> g_stop{false};
extern "C" void OnStopSignal(int) { g_stop.store(true); }
}  // namespace

void InstallStopSignals() {
  struct sigaction sa {};
  sa.sa_handler = OnStopSignal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGHUP, &sa, nullptr);  // a closed terminal is a stop request too, not a crash
  IgnoreSigpipe();
}

bool StopRequested() { return g_stop.load(); }

ControlLink::ControlLink(zmq::context_t& ctx, const std::string& endpoint, const std::string& service)
    : service_(service), sock_(ctx, zmq::socket_type::dealer) {
  sock_.set(zmq::sockopt::routing_id, service);
  sock_.set(zmq::sockopt::linger, 200);
  try {
    ipc::Connect(sock_, endpoint);
  } catch (const zmq::error_t& e) {
    throw UsageError("--control " + endpoint + ": " + e.what());
  }
}

void ControlLink::Hello() { ipc::SendMessage(sock_, ipc::Encode(ipc::control::Hello{service_, ::getpid()})); }
void ControlLink::Ready(const std::vector<ipc::control::Stat>& stats) {
  ipc::SendMessage(sock_, ipc::Encode(ipc::control::Ready{service_, stats}));
}
void ControlLink::Stats(const std::vector<ipc::control::Stat>& stats) {
  ipc::SendMessage(sock_, ipc::Encode(ipc::control::Stats{service_, stats}));
}
void ControlLink::Dead(int exit_code, const std::string& reason) {
  try {
    ipc::SendMessage(sock_, ipc::Encode(ipc::control::Dead{service_, exit_code, reason}));
  } catch (const std::exception&) {
    // Dying anyway; the launcher also sees the exit status.
  }
}

bool ControlLink::ShutdownReceived() {
  while (auto m = ipc::ReceiveVerified(sock_, false, ipc::DecodeControl, ipc::Clock::now(), rejects_)) {
    if (const auto* s = std::get_if<ipc::control::Shutdown>(&m->message)) {
      std::cerr << "[" << service_ << "] shutdown: " << s->reason << "\n";
      shutdown_ = true;
    } else {
      ++rejects_.rejected;
      rejects_.last_reason = "unexpected control message from the launcher";
    }
  }
  return shutdown_;
}

bool StopPoll::operator()() {
  if (stop_ || StopRequested()) return stop_ = true;
  const Clock::time_point now = Clock::now();
  if (now < next_) return false;
  next_ = now + period_;
  return stop_ = ctl_.ShutdownReceived();
}

double MBps(uint64_t bytes, double seconds) { return seconds > 0 ? static_cast<double>(bytes) / 1e6 / seconds : 0; }

bool WaitForWork(ControlLink& ctl, std::initializer_list<zmq::socket_ref> sockets,
                 std::chrono::milliseconds timeout) {
  return WaitForWork(ctl, std::vector<zmq::socket_ref>(sockets), timeout);
}

bool WaitForWork(ControlLink& ctl, const std::vector<zmq::socket_ref>& sockets, std::chrono::milliseconds timeout) {
  std::vector<zmq::pollitem_t> items;
  for (zmq::socket_ref s : sockets) items.push_back({s.handle(), 0, ZMQ_POLLIN, 0});
  items.push_back({ctl.socket().handle(), 0, ZMQ_POLLIN, 0});
  ipc::Poll(items.data(), items.size(), timeout);
  return !StopRequested() && !ctl.ShutdownReceived();
}

void AddWeightServiceFlags(CLI::App& app, WeightServiceFlags& f) {
  app.add_option("--model", f.model, "checkpoint directory")->required();
  app.add_option("--control", f.control, "launcher control endpoint")->required();
  app.add_option("--bind", f.bind, "endpoint this service binds (ROUTER)")->required();
  app.add_option("--io", f.io, "backend: direct|pread|uring|mmap");
  app.add_option("--inflight", f.inflight, "reads in flight")->check(CLI::Range(1, 1024));
}

}  // namespace k3::svc
