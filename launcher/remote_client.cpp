#include "launcher/remote_client.h"

#include <fcntl.h>
#include <httplib.h>
#include <unistd.h>

#include <atomic>
#include <mutex>
#include <thread>

namespace k3::launch {
namespace {

// A server that accepts no connection within this is down; one that sends nothing for this long
// while a request runs is stuck (k3-server writes a probe every second while a request waits or runs).
constexpr int kConnectSeconds = 5;
constexpr int kSilenceSeconds = 60;

std::unique_ptr<httplib::Client> MakeClient(const ServerUrl& u, const std::string& key) {
  auto c = std::make_unique<httplib::Client>(u.host, u.port);
  c->set_connection_timeout(kConnectSeconds, 0);
  c->set_read_timeout(kSilenceSeconds, 0);
  c->set_write_timeout(kSilenceSeconds, 0);
  if (!key.empty()) c->set_bearer_token_auth(key);
  return c;
}

Error Unreachable(const std::string& url, httplib::Error e) {
  if (e == httplib::Error::Connection)
    return RuntimeFailure("cannot connect to " + url + " (is k3-launch --serve running there?)");
  if (e == httplib::Error::Read) return RuntimeFailure(url + ": the connection ended before the reply did (the server stopped?)");
  return RuntimeFailure(url + ": " + httplib::to_string(e));
}

}  // namespace

RemoteServer::RemoteServer(const std::string& url, std::string api_key) : url_(url), api_key_(std::move(api_key)) {
  std::string why;
  auto u = ParseServerUrl(url, &why);
  if (!u) throw UsageError("--connect '" + url + "': " + why);
  parsed_ = *u;
}

std::string RemoteServer::Get(const std::string& path) const {
  auto c = MakeClient(parsed_, api_key_);
  auto res = c->Get(parsed_.prefix + path);
  if (!res) throw Unreachable(url_, res.error());
  if (res->status != 200) throw HttpFailure(url_, res->status, res->body);
  return res->body;
}

struct RemoteServer::Stream::Impl {
  std::unique_ptr<httplib::Client> client;
  std::string url;
  int pipe[2] = {-1, -1};
  mutable std::mutex mu;
  std::vector<std::string> events;
  std::optional<Error> failure;
  std::atomic<bool> finished{false}, cancelled{false};
  std::atomic<int> status{0};
  std::thread thread;

  void Wake() {
    const char b = 1;
    [[maybe_unused]] ssize_t n = ::write(pipe[1], &b, 1);  // a full pipe is awake already
  }

  void Run(const std::string& path, const std::string& body) {
    httplib::Request req;
    req.method = "POST";
    req.path = path;
    req.body = body;
    req.set_header("Content-Type", "application/json");
    req.set_header("Accept", "text/event-stream");
    std::string error_body;
    SseSplitter sse;
    req.response_handler = [&](const httplib::Response& r) {
      status = r.status;
      return !cancelled;
    };
    req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
      if (cancelled) return false;
      if (status != 200) {
        if (error_body.size() < (64u << 10)) error_body.append(data, n);
        return true;
      }
      std::vector<std::string> got = sse.Push(std::string_view(data, n));
      if (!got.empty()) {
        std::lock_guard<std::mutex> lock(mu);
        for (std::string& e : got) events.push_back(std::move(e));
        Wake();
      }
      return true;
    };
    httplib::Response res;
    httplib::Error err = httplib::Error::Success;
    const bool ok = client->send(req, res, err);
    {
      std::lock_guard<std::mutex> lock(mu);
      if (cancelled) {
        // Closed by Cancel: no failure.
      } else if (!ok) {
        failure = Unreachable(url, err);
      } else if (res.status != 200) {
        failure = HttpFailure(url, res.status, error_body.empty() ? res.body : error_body);
      }
    }
    finished = true;
    Wake();
  }
};

RemoteServer::Stream::Stream(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

RemoteServer::Stream::~Stream() {
  Cancel();
  if (impl_->thread.joinable()) impl_->thread.join();
  ::close(impl_->pipe[0]);
  ::close(impl_->pipe[1]);
}

std::unique_ptr<RemoteServer::Stream> RemoteServer::Post(const std::string& path, std::string body) const {
  auto impl = std::make_unique<Stream::Impl>();
  if (::pipe2(impl->pipe, O_CLOEXEC | O_NONBLOCK) != 0) throw RuntimeFailure("pipe: " + std::string(std::strerror(errno)));
  impl->client = MakeClient(parsed_, api_key_);
  impl->url = url_;
  Stream::Impl* p = impl.get();
  p->thread = std::thread([p, full = parsed_.prefix + path, b = std::move(body)] { p->Run(full, b); });
  return std::make_unique<Stream>(std::move(impl));
}

int RemoteServer::Stream::status() const { return impl_->status; }

int RemoteServer::Stream::wake_fd() const { return impl_->pipe[0]; }

std::vector<std::string> RemoteServer::Stream::Take() {
  char buf[64];
  while (::read(impl_->pipe[0], buf, sizeof buf) > 0) {
  }
  std::lock_guard<std::mutex> lock(impl_->mu);
  return std::exchange(impl_->events, {});
}

bool RemoteServer::Stream::finished() const { return impl_->finished; }

std::optional<Error> RemoteServer::Stream::failure() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->failure;
}

void RemoteServer::Stream::Cancel() {
  if (impl_->finished || impl_->cancelled.exchange(true)) return;
  impl_->client->stop();  // shuts the socket: the blocked read returns
}

bool RemoteServer::Stream::cancelled() const { return impl_->cancelled; }

}  // namespace k3::launch
