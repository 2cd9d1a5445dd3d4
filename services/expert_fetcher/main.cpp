// k3-expert-fetcher: serves ExpertRequest from an LRU cache of expert slots in the experts
// arena (docs/pipeline.md "Experts"). Process shell: flags, arena, sockets, loop; the cache
// policy is expert_cache.h, the counters and trace files cache_trace.h.
#include <CLI/CLI.hpp>
#include <zmq.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <deque>
#include <iostream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "common/cli_parse.h"
#include "common/error.h"
#include "common/ipc/protocol.h"
#include "common/ipc/shm_arena.h"
#include "common/ipc/slot_table.h"
#include "common/ipc/zmq_channel.h"
#include "common/model_config.h"
#include "common/read_window.h"
#include "common/safetensors.h"
#include "common/service/read_worker.h"
#include "common/service/service_shell.h"
#include "common/tensor_names.h"
#include "services/expert_fetcher/cache_trace.h"
#include "services/expert_fetcher/expert_cache.h"
#include "services/expert_fetcher/expert_verify.h"
#include "services/expert_fetcher/remote_reads.h"
#include "common/process_init.h"
#include "common/run_main.h"

namespace k3::svc {
namespace {

using ipc::Clock;
namespace x = ipc::experts;
constexpr const char* kService = "expert-fetcher";

struct Flags : WeightServiceFlags {
  std::string arena, dump_dir;
  bool warm = false;  // read every expert ahead (the plan gave every expert a slot)
  std::vector<std::string> remote;  // k3-expert-server endpoints: experts come from there, not the shards
  double remote_timeout = 60;       // seconds without an answer before a remote read fails
  std::vector<std::string> remote_server_key;  // CURVE: the servers' public certs (one, or one per --remote)
  std::string remote_client_key;               // CURVE: this client's NAME_secret
  std::string manifest;          // expert manifest (default: k3-manifest.json in the model directory)
  bool no_verify = false;        // remote experts are not checked against a manifest
};

struct Waiter {
  std::string identity;
  uint64_t request_id = 0;
};

class ExpertFetcher {
 public:
  ExpertFetcher(const Flags& f, zmq::context_t& ctx, ControlLink& ctl) : f_(f), ctx_(ctx), ctl_(ctl) {}

  void Start() {
    ck_.emplace(Checkpoint::Open(f_.model));
    cfg_ = LoadModelConfig(f_.model + "/config.json");
    arena_ = ipc::ShmArena::Open(f_.arena, true);
    table_.emplace(ipc::SlotTable::Attach(arena_));
    table_->RetireAll();  // after a crash compute may still hold references
    worker_.emplace(ctx_, "experts-io", f_.io, ck_->shard_paths(), f_.inflight);
    for (size_t i = 0; i < ck_->shard_paths().size(); ++i) sizes_.push_back(worker_->file_size(static_cast<int>(i)));
    // Every expert must fit a slot with its read window (the first byte then sits `lead` bytes
    // into the slot, which compute derives from the shard header).
    uint64_t widest = 0;
    for (int l = static_cast<int>(cfg_.first_k_dense_replace); l < cfg_.num_layers; ++l)
      for (int e = 0; e < cfg_.num_experts; ++e) {
        const ReadRun& r = Run(l, e);
        widest = std::max(widest, r.wlength());
      }
    if (widest > table_->slot_bytes())
      throw RuntimeFailure(f_.arena + ": expert slots hold " + std::to_string(table_->slot_bytes()) +
                           " bytes, the widest expert read needs " + std::to_string(widest));
    cache_.emplace(table_->slot_count());
    trace_.emplace(static_cast<int>(cfg_.num_layers), static_cast<int>(cfg_.num_experts));
    router_.emplace(ctx_, zmq::socket_type::router);
    router_->set(zmq::sockopt::linger, 0);
    ipc::BindPrivate(*router_, f_.bind);
    if (!f_.remote.empty()) {
      // Re-send well before giving up, but not so often that a busy server reads twice; drop a
      // silent server (when others are left) after half the timeout, at most 10 s, so its reads
      // move on long before a read would fail (docs/pipeline.md "Several expert servers").
      RemoteReadsOptions o;
      o.in_flight = f_.inflight;
      o.give_up = std::chrono::milliseconds(static_cast<int64_t>(f_.remote_timeout * 1000));
      o.resend = std::min(std::chrono::milliseconds(5000), o.give_up / 4);
      o.drop_after = std::min(std::chrono::milliseconds(10000), o.give_up / 2);
      for (const std::string& cert : f_.remote_server_key)
        o.curve.push_back(ipc::ReadClientKeys(f_.remote_client_key, cert));
      remote_.emplace(ctx_, f_.remote, o);
      std::string eps;
      for (const std::string& ep : f_.remote) eps += (eps.empty() ? "" : ", ") + ep;
      std::fprintf(stderr, "[expert-fetcher] routed experts come from the expert server%s at %s\n",
                   f_.remote.size() > 1 ? "s" : "", eps.c_str());
    }
    verify_ = StartVerifier(ctx_, f_.model, f_.manifest, cfg_, remote_.has_value(), f_.no_verify);
    polled_ = {*router_, worker_->notifier()};
    if (remote_)
      for (zmq::socket_ref s : remote_->sockets()) polled_.push_back(s);
    if (verify_) polled_.push_back(verify_->notifier());
    if (f_.warm) QueueWarmUp();
  }

  // When every routed expert has a slot, nothing is ever evicted: read them all ahead as
  // prefetches (served only while no demand read is pending) so compute does not wait on a
  // first use. The trace still records only compute's demand requests.
  void QueueWarmUp() {
    if (static_cast<int64_t>(table_->slot_count()) < cfg_.routed_expert_count()) return;
    for (int l = static_cast<int>(cfg_.first_k_dense_replace); l < cfg_.num_layers; ++l) {
      x::ExpertRequest r;
      r.layer = l;
      r.priority = x::Priority::kPrefetch;
      for (int e = 0; e < cfg_.num_experts; ++e) r.experts.push_back(e);
      prefetch_.push_back(std::move(r));
    }
  }

  std::vector<ipc::control::Stat> StartStats() const {
    return {{"expert_slots", static_cast<double>(table_->slot_count())},
            {"slot_bytes", static_cast<double>(table_->slot_bytes())}};
  }

  void Serve() {
    for (;;) {
      const bool awake = WaitForWork(ctl_, polled_, std::chrono::milliseconds(100));
      if (!awake) return;
      OnCompletions();
      while (auto m = ipc::ReceiveVerified(*router_, true, ipc::DecodeExperts, Clock::now(), rejects_)) {
        const std::string id = m->identity;
        std::visit([this, &id](const auto& msg) { OnMessage(id, msg); }, m->message);
      }
      // Prefetch only when no demand read is queued or in flight, one expert at a time.
      while (demand_inflight_ == 0 && ReadsPending() == 0 && (hint_ || !prefetch_.empty())) ServeOnePrefetch();
      // The counters once a second while they move: k3-server's /metrics shows them live.
      if (Clock::now() >= next_stats_ && trace_->requests() != stats_requests_) {
        stats_requests_ = trace_->requests();
        next_stats_ = Clock::now() + std::chrono::seconds(1);
        ctl_.Stats(FinalStats());
      }
    }
  }

  uint64_t rejected() const {
    return rejects_.rejected + ctl_.rejects().rejected + (remote_ ? remote_->rejects().rejected : 0);
  }

  std::vector<ipc::control::Stat> FinalStats() const {
    const double hr = trace_->requests() ? static_cast<double>(trace_->hits()) / trace_->requests() : 0;
    std::vector<ipc::control::Stat> st = {{"requests", static_cast<double>(trace_->requests())},
            {"hits", static_cast<double>(trace_->hits())},
            {"misses", static_cast<double>(trace_->misses())},
            {"hit_rate", hr},
            {"bytes_read", static_cast<double>(bytes_read_)},
            {"read_mb_s", MBps(bytes_read_, read_seconds_)},
            {"prefetch_dropped", static_cast<double>(prefetch_dropped_)},
            {"hints_received", static_cast<double>(hints_received_)},
            {"prefetch_reads", static_cast<double>(prefetch_reads_)},
            {"prefetch_used", static_cast<double>(prefetch_used_)},
            {"remote_resends", static_cast<double>(remote_ ? remote_->resends() : 0)},
            {"verified_experts", static_cast<double>(verify_ ? verify_->verified() : 0)},
            {"manifest_mismatches", static_cast<double>(verify_ ? verify_->mismatches() : 0)},
            {"rejected_messages", static_cast<double>(rejected())}};
    // Per expert server, in --remote order (the launcher's report names them).
    if (remote_) {
      const auto servers = remote_->stats();
      st.push_back({"remote_servers", static_cast<double>(servers.size())});
      for (size_t i = 0; i < servers.size(); ++i) {
        const RemoteServerStats& s = servers[i];
        const std::string p = "server_" + std::to_string(i) + "_";
        st.insert(st.end(), {{p + "experts", static_cast<double>(s.experts)},
                             {p + "bytes", static_cast<double>(s.bytes)},
                             {p + "seconds", s.seconds},
                             {p + "failures", static_cast<double>(s.failures)},
                             {p + "resends", static_cast<double>(s.resends)},
                             {p + "moved", static_cast<double>(s.moved)},
                             {p + "dropped", s.dropped ? 1.0 : 0.0}});
      }
    }
    return st;
  }

  void Finish() {
    const double hr = trace_->requests() ? 100.0 * trace_->hits() / trace_->requests() : 0;
    std::fprintf(stderr,
                 "[expert-fetcher] stats: %llu requests, hit rate %.1f%%, read %s in %.2f s (%.0f MB/s), "
                 "%llu read ahead (%llu then requested), %llu rejected messages\n",
                 static_cast<unsigned long long>(trace_->requests()), hr, FormatBytes(bytes_read_).c_str(),
                 read_seconds_, MBps(bytes_read_, read_seconds_), static_cast<unsigned long long>(prefetch_reads_),
                 static_cast<unsigned long long>(prefetch_used_), static_cast<unsigned long long>(rejected()));
    if (!f_.dump_dir.empty()) trace_->Write(f_.dump_dir);
  }

 private:
  // Where one expert's six tensors are read from (common/read_window.h).
  const ReadRun& Run(int layer, int expert) {
    const uint64_t key = ExpertKey{layer, expert}.packed();
    auto it = runs_.find(key);
    if (it != runs_.end()) return it->second;
    const ByteRange r = ExpertRange(*ck_, layer, expert);
    return runs_.emplace(key, Widen(r, sizes_.at(static_cast<size_t>(r.shard)))).first->second;
  }

  void Fail(const std::string& id, uint64_t rid, int layer, int expert, x::Error err, const std::string& why) {
    ipc::SendMessage(*router_, ipc::Encode(x::ExpertFailed{rid, layer, expert, err, why}), {}, id);
  }

  void SendReady(const std::string& id, uint64_t rid, uint32_t s) {
    const auto& slot = cache_->slot(s);
    cache_->Hold(s);
    ipc::SendMessage(*router_,
                     ipc::Encode(x::ExpertReady{rid, slot.key.layer, slot.key.expert, static_cast<int32_t>(s),
                                                slot.generation}),
                     {}, id);
  }

  // Starts reading `key` into a victim slot; false when every slot is held or filling.
  bool StartRead(ExpertKey key, bool demand) {
    const auto victim = cache_->PickVictim();
    if (!victim) return false;
    const ReadRun& r = Run(key.layer, key.expert);
    cache_->StartFill(*victim, key);
    uint8_t* dst = table_->BeginFill(*victim);
    if (ReadsPending() == 0) t_busy_ = Clock::now();
    if (remote_) {  // the same bytes at the same place in the slot, from the server
      remote_->Submit(*victim, key.layer, key.expert, dst + r.lead(), r.length());
    } else {
      worker_->Submit({*victim, r.shard, {{r.wbegin, r.wlength(), dst}}});
    }
    demand_fill_[*victim] = demand;
    if (demand) ++demand_inflight_;
    if (demand) {
      prefetched_.erase(*victim);
    } else {
      prefetched_.insert(*victim);
      ++prefetch_reads_;
    }
    return true;
  }

  void OnMessage(const std::string& id, const x::ExpertRequest& m) {
    if (m.priority == x::Priority::kPrefetch) {
      // Compute's next-layer guess. Only the newest one still matters; and with fewer than two
      // layers' worth of slots a guess would take the slot the next demand needs.
      ++hints_received_;
      if (table_->slot_count() >= 2 * static_cast<uint64_t>(cfg_.top_k)) hint_ = m;
      return;
    }
    std::vector<ExpertKey> misses;
    for (int32_t e : m.experts) {
      if (!cfg_.has_routed_expert(m.layer, e)) {
        Fail(id, m.request_id, m.layer, e, x::Error::kOutOfRange,
             "layer " + std::to_string(m.layer) + " expert " + std::to_string(e) + " has no routed expert");
        continue;
      }
      const auto s = cache_->Find({m.layer, e});
      const bool hit = s && cache_->slot(*s).state == ExpertCache::State::kReady;
      trace_->Record(m.layer, e, hit);
      if (s && prefetched_.erase(*s)) ++prefetch_used_;  // a guess (or warm-up read) that came true
      if (hit) {
        cache_->Touch(*s);
        SendReady(id, m.request_id, *s);
      } else if (s) {
        waiters_[*s].push_back({id, m.request_id});  // already in flight (prefetch or another request)
        if (!demand_fill_[*s]) {
          demand_fill_[*s] = true;
          ++demand_inflight_;
        }
      } else {
        misses.push_back({m.layer, e});
      }
    }
    // Misses are read in file order.
    std::sort(misses.begin(), misses.end(), [this](ExpertKey a, ExpertKey b) {
      const ReadRun &ra = Run(a.layer, a.expert), &rb = Run(b.layer, b.expert);
      return std::pair(ra.shard, ra.begin) < std::pair(rb.shard, rb.begin);
    });
    for (ExpertKey k : misses) {
      if (!StartRead(k, true)) {
        Fail(id, m.request_id, k.layer, k.expert, x::Error::kNoSlot,
             "all " + std::to_string(cache_->size()) + " expert slots are held or filling");
        continue;
      }
      waiters_[*cache_->Find(k)].push_back({id, m.request_id});
    }
  }

  void OnMessage(const std::string&, const x::ExpertRelease& m) {
    const auto& slot = m.slot >= 0 && static_cast<uint32_t>(m.slot) < cache_->size() ? &cache_->slot(m.slot) : nullptr;
    const bool same_key = slot && slot->key == ExpertKey{m.layer, m.expert};
    if (!same_key || !cache_->Release(static_cast<uint32_t>(m.slot), m.generation)) {
      ++rejects_.rejected;
      rejects_.last_reason = "stale ExpertRelease for layer " + std::to_string(m.layer) + " expert " +
                             std::to_string(m.expert) + " slot " + std::to_string(m.slot);
    }
  }

  template <class M>
  void OnMessage(const std::string&, const M&) {
    ++rejects_.rejected;
    rejects_.last_reason = "unexpected experts message from compute";
  }

  size_t ReadsPending() const {
    return worker_->pending() + (remote_ ? remote_->pending() : 0) + (verify_ ? verify_->pending() : 0);
  }

  // The newest hint first, then the warm-up queue.
  void ServeOnePrefetch() {
    x::ExpertRequest& m = hint_ ? *hint_ : prefetch_.front();
    while (!m.experts.empty()) {
      const int32_t e = m.experts.front();
      m.experts.erase(m.experts.begin());
      if (!cfg_.has_routed_expert(m.layer, e) || cache_->Find({m.layer, e})) continue;
      if (!StartRead({m.layer, e}, false)) ++prefetch_dropped_;
      return;  // at most one prefetch read queued at a time
    }
    if (hint_) {
      hint_.reset();
    } else {
      prefetch_.pop_front();
    }
  }

  void OnCompletions() {
    std::vector<ReadDone> done = worker_->TakeCompleted();
    if (remote_)
      for (ReadDone& d : remote_->TakeCompleted()) {
        if (verify_ && d.error.empty()) {  // checked against the manifest before the slot is published
          const auto s = static_cast<uint32_t>(d.tag);
          const ExpertKey key = cache_->slot(s).key;
          const ReadRun& r = Run(key.layer, key.expert);
          const uint8_t* bytes = arena_.data() + table_->slot_offset(s) + r.lead();
          const std::string server = d.source;
          verify_->Submit(std::move(d), key.layer, key.expert, bytes, r.length(), server);
          continue;
        }
        done.push_back(std::move(d));
      }
    if (verify_)
      for (ReadDone& d : verify_->TakeCompleted()) done.push_back(std::move(d));
    if (done.empty()) return;
    for (const ReadDone& d : done) {
      const auto s = static_cast<uint32_t>(d.tag);
      const ExpertKey key = cache_->slot(s).key;
      std::vector<Waiter> waiting = std::move(waiters_[s]);
      waiters_.erase(s);
      if (demand_fill_[s]) --demand_inflight_;
      demand_fill_[s] = false;
      if (!d.error.empty()) {
        std::cerr << "[expert-fetcher] " << d.error << "\n";
        cache_->Abandon(s);
        prefetched_.erase(s);
        const x::Error why = d.corrupt ? x::Error::kBadChecksum : x::Error::kReadFailed;
        for (const Waiter& w : waiting) Fail(w.identity, w.request_id, key.layer, key.expert, why, d.error);
        continue;
      }
      cache_->FinishFill(s, table_->Publish(s));
      bytes_read_ += d.bytes;
      for (const Waiter& w : waiting) SendReady(w.identity, w.request_id, s);
    }
    if (ReadsPending() == 0) read_seconds_ += Seconds(t_busy_);
  }

  Flags f_;
  zmq::context_t& ctx_;
  ControlLink& ctl_;
  std::optional<Checkpoint> ck_;
  ModelConfig cfg_;
  std::vector<uint64_t> sizes_;
  std::map<uint64_t, ReadRun> runs_;
  ipc::ShmArena arena_;
  std::optional<ipc::SlotTable> table_;
  std::optional<ExpertCache> cache_;
  std::optional<CacheTrace> trace_;
  std::optional<ReadWorker> worker_;
  std::optional<RemoteReads> remote_;
  std::unique_ptr<ExpertVerifier> verify_;  // remote experts checked against the manifest
  std::optional<zmq::socket_t> router_;
  std::vector<zmq::socket_ref> polled_;  // compute's requests, local read completions, the servers
  std::map<uint32_t, std::vector<Waiter>> waiters_;
  std::map<uint32_t, bool> demand_fill_;
  std::deque<x::ExpertRequest> prefetch_;  // warm-up reads (--warm)
  std::optional<x::ExpertRequest> hint_;   // compute's newest next-layer guess
  std::set<uint32_t> prefetched_;          // slots filled by a prefetch, not yet demanded
  int demand_inflight_ = 0;
  ipc::RejectCounter rejects_;
  uint64_t bytes_read_ = 0, prefetch_dropped_ = 0, hints_received_ = 0, prefetch_reads_ = 0, prefetch_used_ = 0;
  double read_seconds_ = 0;
  Clock::time_point t_busy_;
  Clock::time_point next_stats_{};  // the next live Stats (k3-server /metrics)
  uint64_t stats_requests_ = 0;     // requests counted in the last one
};

int Main(int argc, char** argv) {
  Flags f;
  CLI::App app{"k3-expert-fetcher: routed experts into the shared expert arena (LRU)"};
  AddWeightServiceFlags(app, f);
  app.add_option("--arena", f.arena, "shm name of the experts arena")->required();
  app.add_option("--dump-cache-trace", f.dump_dir, "write expert_hist.json and expert_trace.bin into DIR at exit");
  app.add_flag("--warm", f.warm, "read every expert ahead when every expert has a slot");
  app.add_option("--remote", f.remote,
                 "read experts from the k3-expert-server at this endpoint (tcp://HOST:PORT); repeat for several")
      ->take_all();
  app.add_option("--remote-timeout", f.remote_timeout,
                 "seconds without an answer before a remote read fails (a silent server among several "
                 "is dropped after half of it, at most 10 s)")
      ->check(CLI::Range(0.1, 86400.0));
  app.add_option("--remote-server-key", f.remote_server_key,
                 "the expert servers' public certificate (CURVE): one for all, or one per --remote in order");
  app.add_option("--remote-client-key", f.remote_client_key, "this client's NAME_secret certificate (CURVE)")
      ->needs(app.get_option("--remote-server-key"));
  app.get_option("--remote-server-key")->needs(app.get_option("--remote-client-key"));
  app.add_option("--manifest", f.manifest, "expert manifest (default: k3-manifest.json in the model directory)");
  app.add_flag("--no-verify", f.no_verify, "do not check experts from --remote against a manifest");
  if (!ParseCommandLine(app, argc, argv, "k3-expert-fetcher")) return kExitOk;
  return RunService<ExpertFetcher>(f.control, kService, f);
}

}  // namespace
}  // namespace k3::svc

int main(int argc, char** argv) {
  k3::InitProcess();  // whole stderr lines, harmless signals (common/process_init.h)
  return k3::RunMain("k3-expert-fetcher", [&] { return k3::svc::Main(argc, argv); });
}
