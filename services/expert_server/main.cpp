// k3-expert-server: the machine with the NVMe end of a split pipeline. It holds the checkpoint,
// reads routed experts on request and sends their bytes over ZeroMQ (tcp:// or any other
// transport) to the k3-expert-fetcher that runs next to compute with `--remote`. The fetcher
// keeps its shared-memory cache; this process only reads and sends, so it keeps no cache of its
// own (the page cache of its machine is the cache). Started by hand (or by the systemd unit in
// configs/), not by k3-launch:
//
//     k3-expert-server keygen NAME          (NAME + NAME_secret, czmq-style certificates)
//     k3-expert-server --model DIR --bind tcp://*:5557 --key NAME_secret --allow CLIENTS/ [...]
//
// Clients authenticate with ZeroMQ CURVE: a ZAP handler admits only the public keys of
// `--allow` (common/ipc/curve.h). Without `--key` only loopback and ipc:// binds are allowed,
// unless `--insecure`.
//
// Protocol (proto/experts.fbs): ExpertRequest in; per expert an ExpertBytes header frame plus
// one frame of exactly `length` raw bytes (the expert's six tensors in file order) whose XXH3
// the receiver checks, or an ExpertFailed. Requests are served in arrival order; priorities
// are the receiver's business.
//
// Bounded memory (docs/pipeline.md "Remote expert server"): libzmq drops frames above
// --max-message-bytes before buffering them and queues at most --receive-hwm messages per
// connection; a request may name at most --max-request-experts experts; each client (CURVE
// key, or connection when insecure) has at most --client-inflight experts between its request
// and the moment ZeroMQ has sent (or dropped) the bytes; read buffers total at most
// --buffer-mib, and one client holds at most its share of them (client_shares.h), served
// round robin; a connection none of whose replies has left for --reply-timeout seconds is
// disconnected. What exceeds a limit is answered with ExpertFailed, never queued.
#include <CLI/CLI.hpp>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <zmq.hpp>

#include <cstdio>
#include <deque>
#include <memory>
#include <set>
#include <tuple>
#include <cstdlib>
#include <iostream>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/cli_parse.h"
#include "common/error.h"
#include "common/ipc/curve.h"
#include "common/ipc/protocol.h"
#include "common/ipc/zmq_channel.h"
#include "common/loopback.h"
#include "common/model_config.h"
#include "common/read_window.h"
#include "common/run_main.h"
#include "common/safetensors.h"
#include "common/service/read_worker.h"
#include "common/service/service_shell.h"
#include "common/tensor_names.h"
#include "services/expert_server/buffer_pool.h"
#include "services/expert_server/client_shares.h"
#include "common/process_init.h"

namespace k3::svc {
namespace {

namespace x = ipc::experts;

struct Flags {
  std::string model, bind, io = "pread";
  int inflight = 4;
  std::string key;                 // this server's NAME_secret certificate (CURVE)
  std::vector<std::string> allow;  // client public certificates, or directories of them
  bool insecure = false;           // a non-loopback bind without --key
  // Limits (docs/pipeline.md "Remote expert server").
  int64_t max_message_bytes = 64 * 1024;
  int receive_hwm = 100;
  int max_request_experts = 64;
  int client_inflight = 64;
  int64_t buffer_mib = 256;
  double reply_timeout = 30;  // seconds a connection may leave every reply untaken
};

// One expert being read: who asked, and where its bytes sit in the aligned read buffer.
struct Pending {
  std::string identity, client;
  uint64_t request_id = 0;
  int layer = 0, expert = 0;
  ReadRun run;  // expert bytes start run.lead() bytes into the buffer
  BufferPool::Buffer* buf = nullptr;
  Charge charge;  // against the client's --client-inflight
};

// One ZeroMQ connection (ROUTER identity): its socket, to disconnect it when it takes no
// replies, and its replies out.
struct Connection {
  std::string client;
  int fd = -1;       // ZMQ_SRCFD of its messages; -1 where the transport has none (inproc)
  std::string peer;  // getpeername of fd when first seen: checked again before a disconnect
  std::shared_ptr<ReplyClock> replies = std::make_shared<ReplyClock>();
  bool overdue = false;  // overdue and could not be disconnected: its requests are refused
};

// "address:port" of a socket's peer, or "" when it has none (not a TCP/IPC socket, closed).
std::string PeerOf(int fd) {
  struct stat st {};
  if (fd < 0 || fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)) return {};
  sockaddr_storage a{};
  socklen_t len = sizeof a;
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) return {};
  char host[INET6_ADDRSTRLEN] = {};
  if (a.ss_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&a);
    inet_ntop(AF_INET, &in->sin_addr, host, sizeof host);
    return std::string(host) + ":" + std::to_string(ntohs(in->sin_port));
  }
  if (a.ss_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&a);
    inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof host);
    return "[" + std::string(host) + "]:" + std::to_string(ntohs(in6->sin6_port));
  }
  return a.ss_family == AF_UNIX ? "unix:" + std::to_string(fd) : std::string();
}

// A request being served, to drop a re-sent copy (same client, id, layer, expert).
using ActiveKey = std::tuple<std::string, uint64_t, int, int>;

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
    uint64_t widest = 0;
    for (int l = static_cast<int>(cfg_.first_k_dense_replace); l < cfg_.num_layers; ++l)
      for (int e = 0; e < cfg_.num_experts; ++e) {
        const ByteRange range = ExpertRange(*ck_, l, e);
        widest = std::max(widest, Widen(range, worker_->file_size(range.shard)).wlength());
      }
    widest_ = (widest + kReadAlign - 1) / kReadAlign * kReadAlign;
    if (widest > static_cast<uint64_t>(f_.buffer_mib) << 20)
      throw UsageError("--buffer-mib " + std::to_string(f_.buffer_mib) + " holds no read of the widest expert (" +
                       FormatBytes(widest) + ")");
    if (!f_.key.empty()) {
      const ipc::CurveKeys keys = ipc::ReadCertificate(f_.key, true);
      zap_.emplace(ctx_, ipc::ReadAllowedKeys(f_.allow));  // before the bind: CURVE asks it
      router_.emplace(ctx_, zmq::socket_type::router);
      ipc::ApplyServerKeys(*router_, keys);
    } else {
      router_.emplace(ctx_, zmq::socket_type::router);
    }
    router_->set(zmq::sockopt::linger, 0);
    router_->set(zmq::sockopt::maxmsgsize, f_.max_message_bytes);
    router_->set(zmq::sockopt::rcvhwm, f_.receive_hwm);
    try {
      router_->bind(f_.bind);
    } catch (const zmq::error_t& e) {
      throw RuntimeFailure(f_.bind + ": " + e.what());
    }
    std::fprintf(stderr, "[expert-server] %s: %lld MoE layers x %lld experts, %s reads, %s, serving on %s\n",
                 f_.model.c_str(), static_cast<long long>(cfg_.moe_layers()),
                 static_cast<long long>(cfg_.num_experts), worker_->backend(),
                 zap_ ? "CURVE keys" : "no authentication", f_.bind.c_str());
  }

  void Serve() {
    while (!StopRequested()) {
      zmq::pollitem_t items[] = {{router_->handle(), 0, ZMQ_POLLIN, 0},
                                 {worker_->notifier().handle(), 0, ZMQ_POLLIN, 0}};
      // Reads waiting for a buffer start soon after ZeroMQ hands one back.
      ipc::Poll(items, 2, std::chrono::milliseconds(waiting_.empty() ? 100 : 5));
      for (const ReadDone& d : worker_->TakeCompleted()) Finish(d);
      while (auto m = ipc::ReceiveVerified(*router_, true, ipc::DecodeExperts, ipc::Clock::now(), rejects_)) {
        if (const auto* r = std::get_if<x::ExpertRequest>(&m->message)) {
          OnRequest(m->identity, m->user_id, m->source_fd, *r);
        } else {
          ++rejects_.rejected;
          rejects_.last_reason = "not an ExpertRequest";
        }
      }
      DropOverdue();
      StartWaiting();
    }
  }

  void Report() const {
    std::fprintf(stderr, "[expert-server] stats: %llu experts sent, %s in %.2f s of reads (%.0f MB/s), %llu failed, "
                 "%llu rejected messages, %llu over a limit, %llu re-sent requests dropped, %llu keys refused, "
                 "%llu connections dropped for untaken replies, buffers peaked at %s\n",
                 static_cast<unsigned long long>(sent_), FormatBytes(bytes_).c_str(), read_seconds_,
                 MBps(bytes_, read_seconds_), static_cast<unsigned long long>(failed_),
                 static_cast<unsigned long long>(rejects_.rejected), static_cast<unsigned long long>(over_limit_),
                 static_cast<unsigned long long>(duplicates_),
                 static_cast<unsigned long long>(zap_ ? zap_->refused_count() : 0),
                 static_cast<unsigned long long>(overdue_dropped_), FormatBytes(pool_.peak_bytes()).c_str());
  }

 private:
  void Answer(const std::string& id, uint64_t rid, int layer, int expert, x::Error err, const std::string& why) {
    ipc::SendMessage(*router_, ipc::Encode(x::ExpertFailed{rid, layer, expert, err, why}), {}, id);
  }
  void Fail(const std::string& id, uint64_t rid, int layer, int expert, x::Error err, const std::string& why) {
    ++failed_;
    Answer(id, rid, layer, expert, err, why);
  }

  // What one client holds: experts in flight (--client-inflight) and buffer bytes (its share).
  struct ClientLoad {
    std::shared_ptr<std::atomic<int>> inflight = std::make_shared<std::atomic<int>>(0);
    std::shared_ptr<std::atomic<uint64_t>> held = std::make_shared<std::atomic<uint64_t>>(0);
    bool idle() const { return inflight->load() == 0 && held->load() == 0; }
  };
  // The client a request counts against: its CURVE key, or its connection without CURVE.
  ClientLoad& LoadOf(const std::string& client) {
    if (clients_.size() > 4096)  // insecure mode: connections come and go
      std::erase_if(clients_, [](const auto& kv) { return kv.second.idle(); });
    return clients_[client];
  }

  // The connection a message came on, recorded when first seen.
  Connection& ConnectionOf(const std::string& id, const std::string& client, int fd) {
    if (conns_.size() > 4096)
      std::erase_if(conns_, [](const auto& kv) { return kv.second.replies->out.load() == 0; });
    auto [it, fresh] = conns_.try_emplace(id);
    if (fresh) {
      it->second.client = client;
      it->second.fd = fd;
      it->second.peer = PeerOf(fd);
    }
    return it->second;
  }

  // Clients with reads waiting or buffers out: the pool is shared among them.
  size_t BusyClients() const {
    std::set<std::string> busy;
    for (const auto& [client, q] : waiting_)
      if (!q.empty()) busy.insert(client);
    for (const auto& [client, load] : clients_)
      if (load.held->load() > 0) busy.insert(client);
    return busy.size();
  }

  void OverLimit(const std::string& id, uint64_t rid, int layer, int expert, x::Error err, const std::string& why) {
    ++over_limit_;
    Answer(id, rid, layer, expert, err, why);
  }

  void OnRequest(const std::string& id, const std::string& user, int source_fd, const x::ExpertRequest& m) {
    if (m.experts.size() > static_cast<size_t>(f_.max_request_experts)) {
      OverLimit(id, m.request_id, m.layer, -1, x::Error::kOutOfRange,
                "request names " + std::to_string(m.experts.size()) + " experts, this server takes at most " +
                    std::to_string(f_.max_request_experts) + " (--max-request-experts)");
      return;
    }
    const std::string client = user.empty() ? "connection " + HexId(id) : user;
    Connection& conn = ConnectionOf(id, client, source_fd);
    if (conn.overdue) {
      for (int32_t e : m.experts)
        OverLimit(id, m.request_id, m.layer, e, x::Error::kNoSlot,
                  "this connection has taken none of its replies for " + FormatSeconds(f_.reply_timeout) +
                      " (--reply-timeout)");
      return;
    }
    std::shared_ptr<std::atomic<int>> count = LoadOf(client).inflight;
    for (int32_t e : m.experts) {
      if (!cfg_.has_routed_expert(m.layer, e)) {
        Fail(id, m.request_id, m.layer, e, x::Error::kOutOfRange,
             "layer " + std::to_string(m.layer) + " expert " + std::to_string(e) + " has no routed expert");
        continue;
      }
      ActiveKey key{client, m.request_id, m.layer, e};
      if (active_.count(key)) {  // a re-send while the first copy is still being served
        ++duplicates_;
        continue;
      }
      if (count->load() >= f_.client_inflight) {
        OverLimit(id, m.request_id, m.layer, e, x::Error::kNoSlot,
                  "this client has " + std::to_string(count->load()) +
                      " experts in flight, the server's limit is " + std::to_string(f_.client_inflight) +
                      " (--client-inflight)");
        continue;
      }
      const ByteRange range = ExpertRange(*ck_, m.layer, e);
      Pending p;
      p.identity = id;
      p.client = client;
      p.request_id = m.request_id;
      p.layer = m.layer;
      p.expert = e;
      p.run = Widen(range, worker_->file_size(range.shard));
      p.charge = Charge(count);
      active_.insert(key);
      waiting_[client].push_back(std::move(p));
    }
  }

  // Starts waiting reads while the pool has room for their buffers: one read per client in turn
  // (clients in key order, from the one after the last served), each within its share.
  void StartWaiting() {
    const uint64_t share = ClientShareBytes(static_cast<uint64_t>(f_.buffer_mib) << 20, widest_, BusyClients());
    for (bool started = true; started;) {
      started = false;
      std::vector<std::string> order;
      for (auto it = waiting_.upper_bound(last_served_); it != waiting_.end(); ++it) order.push_back(it->first);
      for (auto it = waiting_.begin(); it != waiting_.end() && it->first <= last_served_; ++it)
        order.push_back(it->first);
      for (const std::string& client : order) {
        std::deque<Pending>& q = waiting_[client];
        if (q.empty()) continue;
        Pending& p = q.front();
        std::shared_ptr<std::atomic<uint64_t>> held = LoadOf(client).held;
        if (!MayStartRead(held->load(), p.run.wlength(), share)) continue;
        p.buf = pool_.Get(p.run.wlength());
        if (!p.buf) {  // buffers come back as ZeroMQ sends them
          EraseIdleQueues();
          return;
        }
        p.buf->hold = Hold(std::move(held), p.buf->capacity);
        const uint64_t tag = next_tag_++;
        if (worker_->pending() == 0) t_busy_ = Clock::now();
        worker_->Submit({tag, p.run.shard, {{p.run.wbegin, p.run.wlength(), p.buf->data}}});
        pending_.emplace(tag, std::move(p));
        q.pop_front();
        last_served_ = client;
        started = true;
      }
    }
    EraseIdleQueues();
  }

  void EraseIdleQueues() {
    std::erase_if(waiting_, [](const auto& kv) { return kv.second.empty(); });
  }

  // A connection none of whose replies has left for --reply-timeout: ZeroMQ would keep its
  // buffers for as long as it stays connected, so it is disconnected (its socket shut down;
  // ZeroMQ then drops what it queued and the buffers come back), and its waiting reads are
  // dropped. Where the socket is unknown (inproc) or no longer the one first seen, its
  // requests are refused until a reply leaves.
  void DropOverdue() {
    const auto now = Clock::now();
    if (now < next_overdue_check_) return;
    next_overdue_check_ = now + std::chrono::milliseconds(200);
    const auto timeout = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(f_.reply_timeout));
    for (auto it = conns_.begin(); it != conns_.end();) {
      Connection& c = it->second;
      const bool overdue = RepliesOverdue(c.replies->out.load(), c.replies->LastProgress(), now, timeout);
      if (!overdue) {
        c.overdue = false;
        ++it;
        continue;
      }
      if (c.overdue) {
        ++it;
        continue;
      }
      DropWaitingOf(it->first, c.client);
      const bool same_socket = !c.peer.empty() && PeerOf(c.fd) == c.peer;
      std::fprintf(stderr, "[expert-server] %s (%s): none of its %d replies out has left for %s (--reply-timeout): %s\n",
                   c.peer.empty() ? "a connection" : c.peer.c_str(), c.client.c_str(), c.replies->out.load(),
                   FormatSeconds(f_.reply_timeout).c_str(),
                   same_socket ? "disconnected" : "its socket is unknown, its requests are refused");
      if (same_socket && shutdown(c.fd, SHUT_RDWR) == 0) {
        ++overdue_dropped_;
        it = conns_.erase(it);  // its buffers still count until ZeroMQ drops them (Hold)
        continue;
      }
      c.overdue = true;
      ++it;
    }
  }

  void DropWaitingOf(const std::string& id, const std::string& client) {
    auto q = waiting_.find(client);
    if (q == waiting_.end()) return;
    std::erase_if(q->second, [&](const Pending& p) {
      if (p.identity != id) return false;
      active_.erase(ActiveKey{p.client, p.request_id, p.layer, p.expert});
      return true;
    });
  }

  static std::string FormatSeconds(double s) {
    char b[32];
    std::snprintf(b, sizeof b, "%g s", s);
    return b;
  }

  static std::string HexId(const std::string& id) {
    static const char* digits = "0123456789abcdef";
    std::string h;
    for (unsigned char c : id) {
      h += digits[c >> 4];
      h += digits[c & 15];
    }
    return h;
  }

  void Finish(const ReadDone& d) {
    auto it = pending_.find(d.tag);
    if (it == pending_.end()) return;
    Pending& p = it->second;
    active_.erase(ActiveKey{p.client, p.request_id, p.layer, p.expert});
    if (!d.error.empty()) {
      std::cerr << "[expert-server] " << d.error << "\n";
      Fail(p.identity, p.request_id, p.layer, p.expert, x::Error::kReadFailed, d.error);
      pool_.Put(p.buf);
    } else {
      const std::span<const uint8_t> bytes(p.buf->data + p.run.lead(), p.run.length());
      const uint64_t sum = ipc::ExpertChecksum(bytes);
      // ZeroMQ sends straight from the read buffer and hands it back to the pool when done;
      // the client's in-flight count and share go down then, not before.
      p.buf->charge = std::move(p.charge);
      if (auto c = conns_.find(p.identity); c != conns_.end()) p.buf->hold.Send(c->second.replies);
      zmq::message_t frame(p.buf->data + p.run.lead(), p.run.length(), &BufferPool::Release, p.buf);
      ipc::SendMessageMoving(*router_,
                             ipc::Encode(x::ExpertBytes{p.request_id, p.layer, p.expert, p.run.length(), sum}),
                             std::move(frame), p.identity);
      ++sent_;
      bytes_ += p.run.length();
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
  std::optional<ipc::ZapHandler> zap_;  // before router_: the socket closes first
  std::optional<zmq::socket_t> router_;
  std::map<uint64_t, Pending> pending_;  // reads submitted, by tag
  std::map<std::string, std::deque<Pending>> waiting_;  // accepted, waiting for a buffer, per client
  std::string last_served_;                              // the client whose read started last
  std::set<ActiveKey> active_;           // accepted and not answered yet
  std::map<std::string, ClientLoad> clients_;  // in-flight experts and buffer bytes per client
  std::map<std::string, Connection> conns_;                            // by ROUTER identity
  uint64_t widest_ = 0;  // the widest expert read, aligned as the pool allocates it
  Clock::time_point next_overdue_check_;
  uint64_t overdue_dropped_ = 0;
  uint64_t next_tag_ = 1, sent_ = 0, bytes_ = 0, failed_ = 0, over_limit_ = 0, duplicates_ = 0;
  double read_seconds_ = 0;
  Clock::time_point t_busy_;
  ipc::RejectCounter rejects_;
};

int Main(int argc, char** argv) {
  Flags f;
  std::string keygen_name;
  CLI::App app{"k3-expert-server: routed-expert bytes over ZeroMQ for a k3-expert-fetcher --remote"};
  CLI::App* keygen = app.add_subcommand("keygen", "write a CURVE key pair: NAME (public) and NAME_secret (mode 0600)");
  keygen->add_option("NAME", keygen_name, "certificate path; NAME_secret is written next to it")->required();
  app.add_option("--model", f.model, "checkpoint directory (required to serve)");
  app.add_option("--bind", f.bind, "endpoint to bind, e.g. tcp://*:5557 (required to serve)");
  app.add_option("--io", f.io, "read backend: direct, pread, uring, mmap");
  app.add_option("--inflight", f.inflight, "reads in flight")->check(CLI::Range(1, 1024));
  app.add_option("--key", f.key, "this server's NAME_secret certificate: clients must use CURVE");
  app.add_option("--allow", f.allow,
                 "client public certificate, or a directory of them, whose key may connect (repeatable; "
                 "needed with --key)");
  app.add_flag("--insecure", f.insecure, "allow a non-loopback --bind without --key (anyone reaching it reads every expert)");
  app.add_option("--max-message-bytes", f.max_message_bytes,
                 "largest incoming frame; libzmq drops the connection on a larger one before buffering it "
                 "(default 65536)")
      ->check(CLI::Range(int64_t{1024}, int64_t{1} << 30));
  app.add_option("--receive-hwm", f.receive_hwm, "incoming messages queued per connection (default 100)")
      ->check(CLI::Range(1, 100000));
  app.add_option("--max-request-experts", f.max_request_experts,
                 "experts one request may name; a longer request gets ExpertFailed (default 64)")
      ->check(CLI::Range(1, 100000));
  app.add_option("--client-inflight", f.client_inflight,
                 "experts one client (key, or connection without --key) may have requested and not yet "
                 "received; more get ExpertFailed (default 64)")
      ->check(CLI::Range(1, 100000));
  app.add_option("--buffer-mib", f.buffer_mib,
                 "read buffers in MiB, at most; reads wait for a buffer beyond it (default 256)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 24));
  app.add_option("--reply-timeout", f.reply_timeout,
                 "seconds a connection may leave all of its replies untaken before it is disconnected and "
                 "its buffers return to the pool (default 30)")
      ->check(CLI::Range(0.1, 86400.0));
  if (!ParseCommandLine(app, argc, argv, "k3-expert-server")) return kExitOk;
  if (keygen->parsed()) {
    ipc::WriteCertificatePair(keygen_name, ipc::GenerateCurveKeys());
    std::printf("%s: public certificate\n%s_secret: secret certificate (mode 0600)\n", keygen_name.c_str(),
                keygen_name.c_str());
    return kExitOk;
  }
  InstallStopSignals();
  if (f.model.empty() || f.bind.empty()) throw UsageError("--model and --bind are required (or: keygen NAME)");
  if (!f.key.empty() && f.insecure) throw UsageError("--insecure and --key exclude each other");
  if (f.key.empty() && !f.allow.empty()) throw UsageError("--allow needs --key");
  if (!f.key.empty() && f.allow.empty())
    throw UsageError("--key needs --allow: the client certificates (or a directory of them) that may connect");
  // The longest request the server answers must get through libzmq (4 bytes per expert).
  const int64_t longest_request = 1024 + 4 * int64_t{f.max_request_experts};
  if (f.max_message_bytes < longest_request)
    throw UsageError("--max-message-bytes " + std::to_string(f.max_message_bytes) + " is below a request of " +
                     std::to_string(f.max_request_experts) + " experts (--max-request-experts): at least " +
                     std::to_string(longest_request));
  if (f.key.empty() && !f.insecure && !LocalOnlyEndpoint(f.bind))
    throw UsageError(f.bind + " is reachable from other machines: pass --key and --allow (CURVE), or --insecure");
  BufferPool pool(kReadAlign, 64, static_cast<uint64_t>(f.buffer_mib) << 20);  // before the context: destroyed after it
  zmq::context_t ctx;
  ExpertServer server(f, ctx, pool);
  server.Start();
  server.Serve();
  server.Report();
  return kExitInterrupted;  // it only stops on a signal
}

}  // namespace
}  // namespace k3::svc

int main(int argc, char** argv) {
  k3::InitProcess();  // whole stderr lines, harmless signals (common/process_init.h)
  return k3::RunMain("k3-expert-server", [&] { return k3::svc::Main(argc, argv); });
}
