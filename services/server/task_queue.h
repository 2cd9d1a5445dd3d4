// cpp-httplib 0.11's connection queue, sized by us: `workers` threads serve connections; a
// connection arriving while every worker is busy is not queued behind them (httplib's own
// ThreadPool waits) but handed to one overflow thread that answers 429 at once
// (OverloadedThread() is true there; the pre-routing handler turns it into the error).
//
// Before any of that a connection waits at the ConnectionGate (connection_gate.h) until its
// request head has arrived, so a slow client holds no thread.
//
// Thread-safety: enqueue and shutdown are called by httplib's listening thread.
#pragma once
#include <httplib.h>

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "services/server/connection_gate.h"

namespace k3::server {

// True on the overflow thread: the request it serves is answered 429.
bool OverloadedThread();

class BoundedTaskQueue : public httplib::TaskQueue {
 public:
  BoundedTaskQueue(size_t workers, GateLimits gate);
  ~BoundedTaskQueue() override;
  void enqueue(std::function<void()> fn) override;
  void shutdown() override;

 private:
  void Work(bool overflow);
  void Run(std::function<void()> fn);  // a connection whose head is in: to a worker or the overflow

  std::mutex mu_;
  std::condition_variable cv_, overflow_cv_;
  std::deque<std::function<void()>> tasks_, overflow_;
  size_t workers_, busy_ = 0;
  bool shutdown_ = false;
  std::vector<std::thread> threads_;
  ConnectionGate gate_;  // last: stopped (its connections passed on) before the threads
};

}  // namespace k3::server
