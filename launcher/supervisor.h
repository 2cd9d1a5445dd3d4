// Child processes of k3-launch: spawn with a fixed argv, notice deaths (SIGCHLD through a
// self-pipe, so the launcher's poll loop wakes up), restart restartable services with the
// same argv, and stop everything: SIGTERM, deadline, SIGKILL. Only our own children are
// ever signalled. SIGINT/SIGTERM/SIGHUP to the launcher are turned into a flag + pipe byte
// (a requested stop); SIGPIPE is ignored so a closed stdout is an error return, not a death.
#pragma once
#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

namespace k3::launch {

struct Service {
  std::string name;               // "trunk-reader", "expert-fetcher", "compute"
  std::vector<std::string> argv;  // argv[0] is the executable path
  bool restartable = false;
  pid_t pid = -1;                 // -1 when not running
  int restarts = 0;
  bool ready = false;             // sent Ready since its last start
  std::vector<int> inherit_fds{};  // passed across exec (arena memfds, "fd:N" in argv)
  // "NAME=value" entries added to this child's environment. Secrets go only here: K3_API_KEY
  // is removed from every child's inherited environment (kChildOnlyEnv).
  std::vector<std::string> env{};
  bool capture_stderr = false;    // stderr goes to a pipe the launcher reads (quiet mode)
  int stderr_fd = -1;             // read end of that pipe (non-blocking), -1 when none
};

struct Death {
  size_t index = 0;  // into services()
  int status = 0;    // waitpid status
};

// Variables a child gets only through its Service::env, never inherited from the launcher.
inline constexpr const char* kChildOnlyEnv[] = {"K3_API_KEY"};

// The launcher's environment without kChildOnlyEnv, plus `extra` ("NAME=value"), for execve.
std::vector<std::string> ChildEnvironment(char* const* parent, const std::vector<std::string>& extra);

// A waitpid status in words: "exited with status S" / "killed by signal N".
std::string DescribeExit(int status);

class Supervisor {
 public:
  Supervisor();  // installs SIGCHLD/SIGINT/SIGTERM/SIGHUP handlers (one Supervisor per process)
  ~Supervisor();
  Supervisor(const Supervisor&) = delete;
  Supervisor& operator=(const Supervisor&) = delete;

  size_t Add(Service s);  // not started yet
  void Start(size_t i);   // fork + exec; throws RuntimeFailure when fork fails
  std::vector<Service>& services() { return services_; }
  const std::vector<Service>& services() const { return services_; }

  int wake_fd() const;            // readable after a signal; poll it with the sockets
  void DrainWake();
  bool interrupted() const;       // SIGINT, SIGTERM or SIGHUP was received
  int stop_signal() const;        // which one (0: none)
  bool TakeSigint();              // a SIGINT, consumed (the chat's Ctrl-C); other signals stay
  std::vector<Death> Reap();      // every child that ended since the last call

  // SIGTERM to every running child, wait up to `grace`, then SIGKILL and reap.
  void KillAll(std::chrono::milliseconds grace);
  // Waits until every child has exited or the deadline passes; true when none is left.
  bool WaitAll(std::chrono::steady_clock::time_point deadline);
  bool AnyRunning() const;

 private:
  std::vector<Service> services_;
};

}  // namespace k3::launch
