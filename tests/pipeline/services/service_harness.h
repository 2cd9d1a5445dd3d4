// Test harness for the pipeline services: real child processes, real ZeroMQ sockets, real shm.
// Every resource is an RAII guard (child killed with SIGKILL and reaped, arena names unlinked,
// run directory removed), so a failing assertion leaves nothing behind.
#pragma once
#include <gtest/gtest.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zmq.hpp>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/ipc/protocol.h"
#include "common/ipc/shm_arena.h"
#include "common/ipc/slot_table.h"
#include "common/ipc/zmq_channel.h"

namespace k3::test {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

// A tiny checkpoint generated once per build tree (atomic rename, so parallel tests agree).
inline std::string TinyCheckpoint() {
  const fs::path dir = fs::path(K3_SVC_SCRATCH) / "tiny";
  if (fs::exists(dir / "config.json")) return dir.string();
  const fs::path tmp = fs::path(K3_SVC_SCRATCH) / ("tiny.tmp." + std::to_string(::getpid()));
  fs::remove_all(tmp);
  const std::string cmd = std::string(K3_PYTHON) + " " + K3_GENERATOR + " " + tmp.string() + " --preset tiny >/dev/null";
  if (std::system(cmd.c_str()) != 0) throw std::runtime_error("generator failed: " + cmd);
  std::error_code ec;
  fs::rename(tmp, dir, ec);  // another test may have won the race; its copy is identical
  fs::remove_all(tmp);
  return dir.string();
}

inline std::vector<uint8_t> FileBytes(const std::string& path, uint64_t off, uint64_t len) {
  std::vector<uint8_t> out(len);
  std::ifstream f(path, std::ios::binary);
  f.seekg(static_cast<std::streamoff>(off));
  f.read(reinterpret_cast<char*>(out.data()), static_cast<std::streamsize>(len));
  if (static_cast<uint64_t>(f.gcount()) != len) throw std::runtime_error("short read of " + path);
  return out;
}

class Child {
 public:
  Child() = default;
  Child(const std::vector<std::string>& argv, const std::string& stderr_path) {
    pid_ = ::fork();
    if (pid_ == 0) {
      int fd = ::open(stderr_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
      if (fd >= 0) ::dup2(fd, 2);
      std::vector<char*> args;
      for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
      args.push_back(nullptr);
      ::execv(args[0], args.data());
      ::_exit(127);
    }
  }
  ~Child() { Kill9(); }
  Child(Child&& o) noexcept : pid_(std::exchange(o.pid_, -1)) {}
  Child& operator=(Child&& o) noexcept {
    Kill9();
    pid_ = std::exchange(o.pid_, -1);
    return *this;
  }
  void Kill9() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
      pid_ = -1;
    }
  }
  // Exit status (WEXITSTATUS, or 128+signal) within `timeout`; -1 on timeout (child killed).
  int Wait(std::chrono::milliseconds timeout = 10s) {
    const auto end = std::chrono::steady_clock::now() + timeout;
    while (pid_ > 0) {
      int st = 0;
      pid_t r = ::waitpid(pid_, &st, WNOHANG);
      if (r == pid_) {
        pid_ = -1;
        return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      }
      if (std::chrono::steady_clock::now() > end) {
        Kill9();
        return -1;
      }
      std::this_thread::sleep_for(10ms);
    }
    return -1;
  }
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
};

// A fake launcher: run directory with ipc endpoints, control ROUTER, arenas named after the
// test process (so CleanupShm(getpid()) finds leftovers).
class FakeLauncher {
 public:
  FakeLauncher() : ctx_(), control_(ctx_, zmq::socket_type::router) {
    run_ = fs::temp_directory_path() / ("k3-svctest-" + std::to_string(::getpid()) + "-" + std::to_string(counter_++));
    fs::create_directories(run_);
    control_.set(zmq::sockopt::linger, 0);
    control_.bind(Endpoint("control"));
  }
  ~FakeLauncher() {
    std::error_code ec;
    fs::remove_all(run_, ec);
  }
  std::string Endpoint(const std::string& name) const { return "ipc://" + (run_ / name).string(); }
  std::string StderrPath(const std::string& name) const { return (run_ / (name + ".stderr")).string(); }
  std::string ReadStderr(const std::string& name) const {
    std::ifstream f(StderrPath(name));
    return std::string(std::istreambuf_iterator<char>(f), {});
  }
  std::string ArenaName(const std::string& region) const { return ipc::ShmArena::Name(::getpid(), region); }
  zmq::context_t& ctx() { return ctx_; }

  // Next control message within `timeout`, or nullopt.
  std::optional<ipc::Received<ipc::control::Message>> Control(std::chrono::milliseconds timeout = 20s) {
    return ipc::ReceiveVerified(control_, true, ipc::DecodeControl, ipc::Clock::now() + timeout, rejects_);
  }
  // Waits for Hello then Ready from `service`; false (with a message) otherwise.
  ::testing::AssertionResult WaitReady(const std::string& service) {
    bool hello = false;
    for (;;) {
      auto m = Control();
      if (!m) return ::testing::AssertionFailure() << service << ": no Hello/Ready within the deadline";
      if (std::holds_alternative<ipc::control::Hello>(m->message)) hello = true;
      if (std::holds_alternative<ipc::control::Dead>(m->message))
        return ::testing::AssertionFailure() << service << " died: " << std::get<ipc::control::Dead>(m->message).reason;
      if (std::holds_alternative<ipc::control::Ready>(m->message))
        return hello ? ::testing::AssertionSuccess() : ::testing::AssertionFailure() << "Ready before Hello";
    }
  }
  void Shutdown(const std::string& service) {
    ipc::SendMessage(control_, ipc::Encode(ipc::control::Shutdown{"test done"}), {}, service);
  }
  // Sends Shutdown and returns the service's final Stats as name -> value: the last Stats
  // before the control link goes quiet (the weight services also send live Stats while they
  // read, which may still be queued ahead of the final one).
  std::map<std::string, double> ShutdownAndStats(const std::string& service) {
    Shutdown(service);
    std::map<std::string, double> out;
    bool got = false;
    for (;;) {
      auto m = Control(got ? 1s : 10s);
      if (!m) return out;
      if (const auto* s = std::get_if<ipc::control::Stats>(&m->message)) {
        out.clear();
        for (const auto& st : s->stats) out[st.name] = st.value;
        got = true;
      }
    }
  }

 private:
  static inline int counter_ = 0;
  fs::path run_;
  zmq::context_t ctx_;
  zmq::socket_t control_;
  ipc::RejectCounter rejects_;
};

// A compute-side DEALER on a service endpoint.
class Peer {
 public:
  Peer(zmq::context_t& ctx, const std::string& endpoint) : sock_(ctx, zmq::socket_type::dealer) {
    sock_.set(zmq::sockopt::linger, 0);
    sock_.connect(endpoint);
  }
  template <class M>
  void Send(const M& m) {
    ipc::SendMessage(sock_, ipc::Encode(m));
  }
  void SendRaw(const std::vector<std::string>& frames) {
    for (size_t i = 0; i < frames.size(); ++i)
      sock_.send(zmq::buffer(frames[i]), i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
  }
  template <class Msg>
  std::optional<Msg> Recv(ipc::Result<Msg> (*decode)(std::span<const uint8_t>, std::span<const uint8_t>),
                          std::chrono::milliseconds timeout = 10s) {
    auto r = ipc::ReceiveVerified(sock_, false, decode, ipc::Clock::now() + timeout, rejects_);
    if (!r) return std::nullopt;
    return r->message;
  }
  zmq::socket_t& socket() { return sock_; }

 private:
  zmq::socket_t sock_;
  ipc::RejectCounter rejects_;
};

inline size_t ShmLeftovers() {
  const std::string prefix = "k3-" + std::to_string(::getpid()) + "-";
  size_t n = 0;
  for (const auto& e : fs::directory_iterator("/dev/shm"))
    if (e.path().filename().string().rfind(prefix, 0) == 0) ++n;
  return n;
}

}  // namespace k3::test
