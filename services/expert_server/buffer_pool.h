// Aligned read buffers for k3-expert-server, reused: a fresh 17.5 MB allocation per expert
// costs page faults on every read (measured: the server read at ~0.9 GB/s from a disk the
// fetcher reads at ~1.8 GB/s). A buffer goes back to the pool when ZeroMQ has sent it, from
// ZeroMQ's I/O thread, hence the lock. Buffers above `keep` are freed instead of kept.
#pragma once
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <vector>

namespace k3::svc {

class BufferPool {
 public:
  struct Buffer {
    BufferPool* pool = nullptr;
    uint8_t* data = nullptr;
    uint64_t capacity = 0;
  };

  BufferPool(uint64_t align, size_t keep) : align_(align), keep_(keep) {}
  ~BufferPool() {
    for (Buffer* b : free_) Destroy(b);
  }
  BufferPool(const BufferPool&) = delete;
  BufferPool& operator=(const BufferPool&) = delete;

  // A buffer of at least `bytes` (a multiple of the alignment); null when memory is out.
  Buffer* Get(uint64_t bytes) {
    const uint64_t cap = (bytes + align_ - 1) / align_ * align_;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (size_t i = 0; i < free_.size(); ++i)
        if (free_[i]->capacity >= cap) {
          Buffer* b = free_[i];
          free_.erase(free_.begin() + static_cast<std::ptrdiff_t>(i));
          return b;
        }
    }
    auto* data = static_cast<uint8_t*>(std::aligned_alloc(align_, cap));
    if (!data) return nullptr;
    return new Buffer{this, data, cap};
  }

  void Put(Buffer* b) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (free_.size() < keep_) {
        free_.push_back(b);
        return;
      }
    }
    Destroy(b);
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

  uint64_t align_;
  size_t keep_;
  std::mutex mu_;
  std::vector<Buffer*> free_;
};

}  // namespace k3::svc
