// --connect's transport: HTTP to a running k3-launch --serve through cpp-httplib's client
// (Debian's libcpp-httplib). A streamed request runs on a thread of its own and hands its
// server-sent events over, so the caller keeps polling the terminal and its signals; Cancel
// closes the connection, which k3-server notices and answers with a Cancel to compute
// (docs/server.md "Queue, threads, cancellation").
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/error.h"
#include "launcher/remote_api.h"

namespace k3::launch {

class RemoteServer {
 public:
  RemoteServer(const std::string& url, std::string api_key);  // throws UsageError for a bad URL
  const std::string& url() const { return url_; }

  // GET `path` (after the URL's prefix): the body of a 200; throws Error otherwise (unreachable:
  // exit 1; HttpFailure for a status).
  std::string Get(const std::string& path) const;

  class Stream;
  // POSTs `body` (JSON) to `path` and reads the reply as server-sent events on a thread.
  std::unique_ptr<Stream> Post(const std::string& path, std::string body) const;

 private:
  friend class Stream;
  std::string url_, api_key_;
  ServerUrl parsed_;
};

class RemoteServer::Stream {
 public:
  ~Stream();  // cancels and joins
  int wake_fd() const;  // readable when there is news (poll it)
  // The events' data received since the last call (the wake byte drained).
  std::vector<std::string> Take();
  bool finished() const;                 // the request ended (all its events taken or not)
  std::optional<Error> failure() const;  // why it ended, when it was not a 200 read to the end
  int status() const;                    // the HTTP status (0: no answer)
  void Cancel();                         // closes the connection; finished() soon after
  bool cancelled() const;

  struct Impl;
  explicit Stream(std::unique_ptr<Impl> impl);

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace k3::launch
