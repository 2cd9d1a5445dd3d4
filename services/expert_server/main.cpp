// k3-expert-server: the machine with the NVMe end of a split pipeline. It holds the checkpoint,
// reads routed experts on request and sends their bytes over ZeroMQ (tcp:// or any other
// transport) to the k3-expert-fetcher that runs next to compute with `--remote`. The fetcher
// keeps its shared-memory cache; this process only reads and sends, so it keeps no cache of its
// own (the page cache of its machine is the cache). Started by hand, not by k3-launch:
//
//     k3-expert-server --model DIR --bind tcp://*:5557 [--io direct|pread|uring|mmap]
//
// Protocol (proto/experts.fbs): ExpertRequest in; per expert an ExpertBytes header frame plus
// one frame of exactly `length` raw bytes (the expert's six tensors in file order) whose XXH3
// the receiver checks, or an ExpertFailed. Requests are served in arrival order; priorities
// are the receiver's business.
#include <CLI/CLI.hpp>
#include <zmq.hpp>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/ipc/protocol.h"
#include "common/ipc/zmq_channel.h"
#include "common/model_config.h"
#include "common/read_window.h"
#include "common/run_main.h"
#include "common/version.h"
#include "common/safetensors.h"
#include "common/service/read_worker.h"
#include "common/service/service_shell.h"
#include "common/tensor_names.h"
#include "services/expert_server/buffer_pool.h"
#include "common/process_init.h"

namespace k3::svc {
namespace {

namespace x = ipc::experts;

struct Flags {
  std::string model, bind, io = "pread";
  int inflight = 4;
};

// One expert being read: who asked, and where its bytes sit in the aligned read buffer.
struct Pending {
  std::string identity;
  uint64_t request_id = 0;
  int layer = 0, expert = 0;
  uint64_t skip = 0, length = 0;  // expert bytes start `skip` bytes into the buffer
  BufferPool::Buffer* buf = nullptr;
};

class ExpertServer {
 public:
  // `pool` must outlive `ctx`: ZeroMQ returns sent buffers to it until the context ends.
  ExpertServer(const Flags& f, zmq::context_t& ctx, BufferPool& pool) : f_(f), ctx_(ctx), pool_(pool) {}
  ~ExpertServer() {
    worker_.reset();  // no read lands in a buffer after this
    for (auto& [tag, p] : pending_) pool_.Put(p.buf);
  }
  ExpertServer(const ExpertServer&) = delete;
  ExpertServer& operator=(const ExpertServer&) = delete;

  void Start() {
    ck_.emplace(Checkpoint::Open(f_.model));
    cfg_ = LoadModelConfig(f_.model + "/config.json");
    worker_.emplace(ctx_, "expert-server-io", f_.io, ck_->shard_paths(), f_.inflight);
    router_.emplace(ctx_, zmq::socket_type::router);
    router_->set(zmq::sockopt::linger, 0);
    try {
      router_->bind(f_.bind);
    } catch (const zmq::error_t& e) {
      throw RuntimeFailure(f_.bind + ": " + e.what());
    }
    std::fprintf(stderr, "[expert-server] %s: %lld MoE layers x %lld experts, %s reads, serving on %s\n",
                 f_.model.c_str(), static_cast<long long>(cfg_.moe_layers()),
                 static_cast<long long>(cfg_.num_experts), worker_->backend(), f_.bind.c_str());
  }

  void Serve() {
    while (!StopRequested()) {
      zmq::pollitem_t items[] = {{router_->handle(), 0, ZMQ_POLLIN, 0},
                                 {worker_->notifier().handle(), 0, ZMQ_POLLIN, 0}};
      ipc::Poll(items, 2, std::chrono::milliseconds(100));
      for (const ReadDone& d : worker_->TakeCompleted()) Finish(d);
      while (auto m = ipc::ReceiveVerified(*router_, true, ipc::DecodeExperts, ipc::Clock::now(), rejects_)) {
        if (const auto* r = std::get_if<x::ExpertRequest>(&m->message)) {
          OnRequest(m->identity, *r);
        } else {
          ++rejects_.rejected;
          rejects_.last_reason = "not an ExpertRequest";
        }
      }
    }
  }

  void Report() const {
    std::fprintf(stderr, "[expert-server] stats: %llu experts sent, %s in %.2f s of reads (%.0f MB/s), %llu failed, "
                 "%llu rejected messages\n",
                 static_cast<unsigned long long>(sent_), FormatBytes(bytes_).c_str(), read_seconds_,
                 MBps(bytes_, read_seconds_), static_cast<unsigned long long>(failed_),
                 static_cast<unsigned long long>(rejects_.rejected));
  }

 private:
  void Fail(const std::string& id, uint64_t rid, int layer, int expert, x::Error err, const std::string& why) {
    ++failed_;
    ipc::SendMessage(*router_, ipc::Encode(x::ExpertFailed{rid, layer, expert, err, why}), {}, id);
  }

  void OnRequest(const std::string& id, const x::ExpertRequest& m) {
    for (int32_t e : m.experts) {
      if (!cfg_.has_routed_expert(m.layer, e)) {
        Fail(id, m.request_id, m.layer, e, x::Error::kOutOfRange,
             "layer " + std::to_string(m.layer) + " expert " + std::to_string(e) + " has no routed expert");
        continue;
      }
      const ByteRange range = ExpertRange(*ck_, m.layer, e);
      const ReadRun r = Widen(range, worker_->file_size(range.shard));
      Pending p;
      p.identity = id;
      p.request_id = m.request_id;
      p.layer = m.layer;
      p.expert = e;
      p.skip = r.lead();
      p.length = r.length();
      p.buf = pool_.Get(r.wlength());
      if (!p.buf) throw RuntimeFailure("out of memory for a " + std::to_string(r.wlength()) + "-byte expert read");
      const uint64_t tag = next_tag_++;
      if (worker_->pending() == 0) t_busy_ = Clock::now();
      worker_->Submit({tag, r.shard, {{r.wbegin, r.wlength(), p.buf->data}}});
      pending_.emplace(tag, std::move(p));
    }
  }

  void Finish(const ReadDone& d) {
    auto it = pending_.find(d.tag);
    if (it == pending_.end()) return;
    Pending& p = it->second;
    if (!d.error.empty()) {
      std::cerr << "[expert-server] " << d.error << "\n";
      Fail(p.identity, p.request_id, p.layer, p.expert, x::Error::kReadFailed, d.error);
      pool_.Put(p.buf);
    } else {
      const std::span<const uint8_t> bytes(p.buf->data + p.skip, p.length);
      const uint64_t sum = ipc::ExpertChecksum(bytes);
      // ZeroMQ sends straight from the read buffer and hands it back to the pool when done.
      zmq::message_t frame(p.buf->data + p.skip, p.length, &BufferPool::Release, p.buf);
      ipc::SendMessageMoving(*router_, ipc::Encode(x::ExpertBytes{p.request_id, p.layer, p.expert, p.length, sum}),
                             std::move(frame), p.identity);
      ++sent_;
      bytes_ += p.length;
    }
    pending_.erase(it);
    if (worker_->pending() == 0) read_seconds_ += Seconds(t_busy_);
  }

  Flags f_;
  zmq::context_t& ctx_;
  BufferPool& pool_;
  std::optional<Checkpoint> ck_;
  ModelConfig cfg_;
  std::optional<ReadWorker> worker_;
  std::optional<zmq::socket_t> router_;
  std::map<uint64_t, Pending> pending_;
  uint64_t next_tag_ = 1, sent_ = 0, bytes_ = 0, failed_ = 0;
  double read_seconds_ = 0;
  Clock::time_point t_busy_;
  ipc::RejectCounter rejects_;
};

int Main(int argc, char** argv) {
  Flags f;
  CLI::App app{"k3-expert-server: routed-expert bytes over ZeroMQ for a k3-expert-fetcher --remote"};
  app.set_version_flag("--version", VersionLine("k3-expert-server"));
  app.add_option("--model", f.model, "checkpoint directory")->required();
  app.add_option("--bind", f.bind, "endpoint to bind, e.g. tcp://*:5557")->required();
  app.add_option("--io", f.io, "read backend: direct, pread, uring, mmap");
  app.add_option("--inflight", f.inflight, "reads in flight")->check(CLI::Range(1, 1024));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? kExitOk : kExitUsage;
  }
  InstallStopSignals();
  return k3::RunMain("k3-expert-server", [&] {
    BufferPool pool(kReadAlign, 64);  // declared before the context: destroyed after it
    zmq::context_t ctx;
    ExpertServer server(f, ctx, pool);
    server.Start();
    server.Serve();
    server.Report();
    return kExitInterrupted;  // it only stops on a signal
  });
}

}  // namespace
}  // namespace k3::svc

int main(int argc, char** argv) {
  k3::InitProcess();  // whole stderr lines, harmless signals (common/process_init.h)
  return k3::svc::Main(argc, argv);
}
