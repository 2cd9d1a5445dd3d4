// Aligned read buffers for k3-expert-server, reused: a fresh 17.5 MB allocation per expert
// costs page faults on every read (measured: the server read at ~0.9 GB/s from a disk the
// fetcher reads at ~1.8 GB/s). A buffer goes back to the pool when ZeroMQ has sent it (or
// dropped it), from ZeroMQ's I/O thread, hence the lock. Buffers above `keep` are freed
// instead of kept. The pool never holds more than `max_bytes` (buffers out plus buffers kept):
// past that, Get says "later" and the read waits for a buffer to come back.
#pragma once
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <new>
#include <utility>
#include <vector>

namespace k3::svc {

// One expert counted against its client's in-flight cap, from the request until its bytes
// have left the server (ZeroMQ released the frame) or its failure was answered.
class Charge {
 public:
  Charge() = default;
  explicit Charge(std::shared_ptr<std::atomic<int>> count) : count_(std::move(count)) { ++*count_; }
  Charge(Charge&& o) noexcept : count_(std::move(o.count_)) {}
  Charge& operator=(Charge&& o) noexcept {
    if (this != &o) {
      Drop();
      count_ = std::move(o.count_);
    }
    return *this;
  }
  Charge(const Charge&) = delete;
  Charge& operator=(const Charge&) = delete;
  ~Charge() { Drop(); }
  void Drop() {
    if (count_) --*count_;
    count_.reset();
  }

 private:
  std::shared_ptr<std::atomic<int>> count_;
};

// A connection's replies handed to ZeroMQ and not yet gone, and when one last went out first
// or left: the reply deadline (client_shares.h RepliesOverdue) reads it.
struct ReplyClock {
  std::atomic<int> out{0};
  std::atomic<int64_t> last_progress_ns{0};
  void Out() {
    if (out.fetch_add(1) == 0) Touch();
  }
  void Back() {
    out.fetch_sub(1);
    Touch();
  }
  std::chrono::steady_clock::time_point LastProgress() const {
    return std::chrono::steady_clock::time_point(std::chrono::nanoseconds(last_progress_ns.load()));
  }

 private:
  void Touch() {
    last_progress_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                           std::chrono::steady_clock::now().time_since_epoch()).count();
  }
};

// One buffer's bytes counted against its client's share of the pool, from the start of its read
// until ZeroMQ has sent or dropped them; after Send, also one reply out on its connection.
class Hold {
 public:
  Hold() = default;
  Hold(std::shared_ptr<std::atomic<uint64_t>> client_bytes, uint64_t bytes)
      : client_(std::move(client_bytes)), bytes_(bytes) {
    *client_ += bytes_;
  }
  Hold(Hold&& o) noexcept : client_(std::move(o.client_)), conn_(std::move(o.conn_)), bytes_(o.bytes_) {}
  Hold& operator=(Hold&& o) noexcept {
    if (this != &o) {
      Drop();
      client_ = std::move(o.client_);
      conn_ = std::move(o.conn_);
      bytes_ = o.bytes_;
    }
    return *this;
  }
  Hold(const Hold&) = delete;
  Hold& operator=(const Hold&) = delete;
  ~Hold() { Drop(); }
  void Send(std::shared_ptr<ReplyClock> conn) {
    conn_ = std::move(conn);
    conn_->Out();
  }
  void Drop() {
    if (client_) *client_ -= bytes_;
    client_.reset();
    if (conn_) conn_->Back();
    conn_.reset();
  }

 private:
  std::shared_ptr<std::atomic<uint64_t>> client_;
  std::shared_ptr<ReplyClock> conn_;
  uint64_t bytes_ = 0;
};

class BufferPool {
 public:
  struct Buffer {
    BufferPool* pool = nullptr;
    uint8_t* data = nullptr;
    uint64_t capacity = 0;
    Charge charge;  // the client's in-flight count, held while ZeroMQ sends from this buffer
    Hold hold;      // the client's share of the pool and the connection's reply out, likewise
  };

  BufferPool(uint64_t align, size_t keep, uint64_t max_bytes) : align_(align), keep_(keep), max_(max_bytes) {}
  ~BufferPool() {
    for (Buffer* b : free_) Destroy(b);
  }
  BufferPool(const BufferPool&) = delete;
  BufferPool& operator=(const BufferPool&) = delete;

  // A buffer of at least `bytes` (rounded up to the alignment); null when the pool is at its
  // bound (ask again after a Put). Throws std::bad_alloc when memory is out.
  Buffer* Get(uint64_t bytes) {
    const uint64_t cap = (bytes + align_ - 1) / align_ * align_;
    std::vector<Buffer*> drop;  // kept buffers too small to use, freed to make room
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (size_t i = 0; i < free_.size(); ++i)
        if (free_[i]->capacity >= cap) {
          Buffer* b = free_[i];
          free_.erase(free_.begin() + static_cast<std::ptrdiff_t>(i));
          return b;
        }
      while (held_ + cap > max_ && !free_.empty()) {
        drop.push_back(free_.back());
        held_ -= free_.back()->capacity;
        free_.pop_back();
      }
      if (held_ + cap > max_) {
        Free(drop);
        return nullptr;
      }
      held_ += cap;
      peak_ = std::max(peak_, held_);
    }
    Free(drop);
    auto* data = static_cast<uint8_t*>(std::aligned_alloc(align_, cap));
    if (!data) {
      std::lock_guard<std::mutex> lock(mu_);
      held_ -= cap;
      throw std::bad_alloc();
    }
    return new Buffer{this, data, cap, {}, {}};
  }

  void Put(Buffer* b) {
    b->charge.Drop();
    b->hold.Drop();
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (free_.size() < keep_) {
        free_.push_back(b);
        return;
      }
      held_ -= b->capacity;
    }
    Destroy(b);
  }

  // Bytes of buffers out or kept, now and at most so far.
  uint64_t held_bytes() {
    std::lock_guard<std::mutex> lock(mu_);
    return held_;
  }
  uint64_t peak_bytes() {
    std::lock_guard<std::mutex> lock(mu_);
    return peak_;
  }

  // ZeroMQ's free function for a message that points into a pooled buffer (hint = the Buffer).
  static void Release(void* /*data*/, void* hint) {
    auto* b = static_cast<Buffer*>(hint);
    b->pool->Put(b);
  }

 private:
  static void Destroy(Buffer* b) {
    std::free(b->data);
    delete b;
  }
  static void Free(const std::vector<Buffer*>& bs) {
    for (Buffer* b : bs) Destroy(b);
  }

  uint64_t align_;
  size_t keep_;
  uint64_t max_;
  std::mutex mu_;
  std::vector<Buffer*> free_;
  uint64_t held_ = 0, peak_ = 0;
};

}  // namespace k3::svc
