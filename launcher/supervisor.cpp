#include "supervisor.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <thread>

#include "common/error.h"

namespace k3::launch {
namespace {

int g_pipe[2] = {-1, -1};
volatile sig_atomic_t g_stop_signal = 0;

void OnSignal(int sig) {
  const int saved = errno;
  if ((sig == SIGINT || sig == SIGTERM || sig == SIGHUP) && g_stop_signal == 0) g_stop_signal = sig;
  const char b = 1;
  [[maybe_unused]] ssize_t n = ::write(g_pipe[1], &b, 1);  // full pipe: already awake
  errno = saved;
}

}  // namespace

std::string DescribeExit(int status) {
  if (WIFSIGNALED(status)) return "killed by signal " + std::to_string(WTERMSIG(status));
  return "exited with status " + std::to_string(WEXITSTATUS(status));
}

Supervisor::Supervisor() {
  if (::pipe2(g_pipe, O_CLOEXEC | O_NONBLOCK) != 0)
    throw RuntimeFailure(std::string("pipe: ") + std::strerror(errno));
  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART | SA_NOCLDSTOP;
  sigaction(SIGCHLD, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGHUP, &sa, nullptr);
  // SIGPIPE is ignored by k3-launch's main (k3::IgnoreSigpipe): a closed stdout is a stop.
}

Supervisor::~Supervisor() {
  if (AnyRunning()) KillAll(std::chrono::milliseconds(0));
  signal(SIGCHLD, SIG_DFL);
  for (Service& s : services_)
    if (s.stderr_fd >= 0) ::close(s.stderr_fd);
  ::close(g_pipe[0]);
  ::close(g_pipe[1]);
  g_pipe[0] = g_pipe[1] = -1;
}

size_t Supervisor::Add(Service s) {
  services_.push_back(std::move(s));
  return services_.size() - 1;
}

std::vector<std::string> ChildEnvironment(char* const* parent, const std::vector<std::string>& extra) {
  std::vector<std::string> env;
  for (char* const* e = parent; e && *e; ++e) {
    const std::string_view v(*e);
    bool child_only = false;
    for (const char* name : kChildOnlyEnv) {
      const std::string_view n(name);
      child_only = child_only || (v.size() > n.size() && v.substr(0, n.size()) == n && v[n.size()] == '=');
    }
    if (!child_only) env.emplace_back(v);
  }
  env.insert(env.end(), extra.begin(), extra.end());
  return env;
}

void Supervisor::Start(size_t i) {
  Service& s = services_.at(i);
  std::vector<char*> argv;
  for (std::string& a : s.argv) argv.push_back(a.data());
  argv.push_back(nullptr);
  // Built before fork: the child may only make async-signal-safe calls.
  std::vector<std::string> env = ChildEnvironment(environ, s.env);
  std::vector<char*> envp;
  for (std::string& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  int err_pipe[2] = {-1, -1};
  if (s.capture_stderr && ::pipe2(err_pipe, O_CLOEXEC) != 0)
    throw RuntimeFailure("cannot start " + s.name + ": pipe: " + std::strerror(errno));
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) throw RuntimeFailure("cannot start " + s.name + ": fork: " + std::strerror(errno));
  if (pid == 0) {
    if (err_pipe[1] >= 0) ::dup2(err_pipe[1], 2);  // dup2 clears CLOEXEC on fd 2
    // Own process group: a terminal Ctrl-C reaches only the launcher, which then stops the
    // services in order. PDEATHSIG: a launcher killed with -9 still takes its children along.
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) _exit(127);
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    signal(SIGHUP, SIG_DFL);
    signal(SIGPIPE, SIG_DFL);
    signal(SIGCHLD, SIG_DFL);
    // Ignored (an ignored signal stays ignored across exec) until the service's InitProcess
    // installs its handler: a harmless signal must not kill it in between.
    signal(SIGUSR1, SIG_IGN);
    signal(SIGUSR2, SIG_IGN);
    for (int fd : s.inherit_fds) ::fcntl(fd, F_SETFD, 0);  // only this child's arenas cross exec
    ::execve(argv[0], argv.data(), envp.data());
    const std::string msg = "k3-launch: cannot execute " + s.argv[0] + ": " + std::strerror(errno) + "\n";
    [[maybe_unused]] ssize_t n = ::write(2, msg.data(), msg.size());
    _exit(127);
  }
  s.pid = pid;
  s.ready = false;
  if (err_pipe[0] >= 0) {
    ::close(err_pipe[1]);
    if (s.stderr_fd >= 0) ::close(s.stderr_fd);  // the previous instance's pipe
    ::fcntl(err_pipe[0], F_SETFL, O_NONBLOCK);
    s.stderr_fd = err_pipe[0];
  }
}

int Supervisor::wake_fd() const { return g_pipe[0]; }

void Supervisor::DrainWake() {
  char buf[64];
  while (::read(g_pipe[0], buf, sizeof buf) > 0) {
  }
}

bool Supervisor::interrupted() const { return g_stop_signal != 0; }
int Supervisor::stop_signal() const { return g_stop_signal; }
bool Supervisor::TakeSigint() {
  if (g_stop_signal != SIGINT) return false;
  g_stop_signal = 0;
  return true;
}

std::vector<Death> Supervisor::Reap() {
  std::vector<Death> out;
  for (size_t i = 0; i < services_.size(); ++i) {
    Service& s = services_[i];
    if (s.pid <= 0) continue;
    int status = 0;
    const pid_t r = ::waitpid(s.pid, &status, WNOHANG);
    if (r == s.pid) {
      s.pid = -1;
      s.ready = false;
      out.push_back({i, status});
    }
  }
  return out;
}

bool Supervisor::AnyRunning() const {
  for (const Service& s : services_)
    if (s.pid > 0) return true;
  return false;
}

bool Supervisor::WaitAll(std::chrono::steady_clock::time_point deadline) {
  for (;;) {
    Reap();
    if (!AnyRunning()) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

void Supervisor::KillAll(std::chrono::milliseconds grace) {
  for (const Service& s : services_)
    if (s.pid > 0) ::kill(s.pid, SIGTERM);
  if (WaitAll(std::chrono::steady_clock::now() + grace)) return;
  for (const Service& s : services_)
    if (s.pid > 0) ::kill(s.pid, SIGKILL);
  for (Service& s : services_)
    if (s.pid > 0) {
      int status = 0;
      while (::waitpid(s.pid, &status, 0) < 0 && errno == EINTR) {
      }
      s.pid = -1;
    }
}

}  // namespace k3::launch
