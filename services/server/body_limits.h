// The limits a request body is held to, however it is framed (docs/server.md "Limits"):
//   - its bytes: at most max_body_bytes whether sent with Content-Length, chunked or until the
//     connection closes (and after any Content-Encoding is undone); the read stops at the first
//     byte over, before the rest arrives, and the answer is 413;
//   - its time: the whole body within kBodyTimeout of its first read (httplib's timeout is per
//     read, so a byte every few seconds would hold a connection thread for ever); 408;
//   - its JSON: nesting depth and the size it takes once parsed (common/json_strict.h), so a
//     body within the byte limit cannot make the server allocate many times its size; 400.
#pragma once
#include <chrono>
#include <cstddef>
#include <string>

#include "common/json_strict.h"

namespace k3::server {

// Arrays and objects open at once in a request body: a chat request needs 4, a tool's JSON
// schema a few more.
inline constexpr size_t kMaxBodyDepth = 64;
// Parsed bytes per body byte: a prompt of one-digit token ids ("0,") takes 8.
inline constexpr size_t kParsedBytesPerBodyByte = 8;

// For a body of `body_bytes`: what it may become once parsed is bounded by its own size.
JsonLimits RequestJsonLimits(size_t body_bytes);

// A whole body, from the start of its read: a megabyte at 200 kbit/s.
inline constexpr std::chrono::seconds kBodyTimeout{60};

// Collects a body as it arrives; Add refuses (and keeps nothing more) past the byte limit or,
// given `now`, past the deadline.
class BoundedBody {
 public:
  using Clock = std::chrono::steady_clock;
  BoundedBody(size_t limit, Clock::time_point deadline) : limit_(limit), deadline_(deadline) {}
  bool Add(const char* data, size_t n, Clock::time_point now);  // false once over a limit
  bool over() const { return over_; }
  bool late() const { return late_; }
  std::string& text() { return text_; }

 private:
  size_t limit_;
  Clock::time_point deadline_;
  bool over_ = false, late_ = false;
  std::string text_;
};

}  // namespace k3::server
