#include "services/server/task_queue.h"

namespace k3::server {
namespace {
thread_local bool t_overloaded = false;
}  // namespace

bool OverloadedThread() { return t_overloaded; }

BoundedTaskQueue::BoundedTaskQueue(size_t workers, GateLimits gate)
    : workers_(workers), gate_(gate, [this](std::function<void()> fn) { Run(std::move(fn)); }) {
  for (size_t i = 0; i < workers; ++i) threads_.emplace_back([this] { Work(false); });
  threads_.emplace_back([this] { Work(true); });
}

BoundedTaskQueue::~BoundedTaskQueue() { shutdown(); }

void BoundedTaskQueue::enqueue(std::function<void()> fn) { gate_.Admit(std::move(fn)); }

void BoundedTaskQueue::Run(std::function<void()> fn) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    // A connection waits for a worker only if one is free for it now.
    if (busy_ + tasks_.size() < workers_) {
      tasks_.push_back(std::move(fn));
      cv_.notify_one();
      return;
    }
    overflow_.push_back(std::move(fn));
  }
  overflow_cv_.notify_one();
}

void BoundedTaskQueue::shutdown() {
  gate_.Stop();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (shutdown_ && threads_.empty()) return;
    shutdown_ = true;
  }
  cv_.notify_all();
  overflow_cv_.notify_all();
  for (std::thread& t : threads_)
    if (t.joinable()) t.join();
  threads_.clear();
}

// Each queued connection runs even at shutdown: the task owns the socket and closes it.
void BoundedTaskQueue::Work(bool overflow) {
  t_overloaded = overflow;
  auto& queue = overflow ? overflow_ : tasks_;
  auto& cv = overflow ? overflow_cv_ : cv_;
  for (;;) {
    std::function<void()> fn;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv.wait(lock, [&] { return shutdown_ || !queue.empty(); });
      if (queue.empty()) return;
      fn = std::move(queue.front());
      queue.pop_front();
      if (!overflow) ++busy_;
    }
    fn();
    std::lock_guard<std::mutex> lock(mu_);
    if (!overflow) --busy_;
  }
}

}  // namespace k3::server
