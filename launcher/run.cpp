#include "run.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <zmq.hpp>

#include "common/error.h"
#include "common/ipc/protocol.h"
#include "common/ipc/shm_arena.h"
#include "common/ipc/slot_table.h"
#include "common/ipc/zmq_channel.h"
#include "common/median.h"
#include "launcher/run_resources.h"
#include "launcher/tokenizer_client.h"
#include "proc_stats.h"
#include "supervisor.h"

namespace k3::launch {
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

ArenaSizes SizeArenas(const ModelLayout& m, const plan::MemoryPlan& p) {
  // One source of truth: the plan already sized every arena the way the services fill it
  // (widened runs, slot tables); the launcher creates exactly that.
  (void)m;
  ArenaSizes a;
  a.pinned = p.pinned_bytes;
  a.embed_window = p.embed_window_bytes;
  a.ring_slots = static_cast<uint32_t>(p.ring_slots);
  a.ring_slot_bytes = p.ring_slot_bytes;
  a.ring = p.ring_bytes;
  a.expert_slots = static_cast<uint32_t>(p.expert_slots);
  a.expert_slot_bytes = p.expert_slot_bytes;
  a.experts = p.expert_arena_bytes;
  return a;
}

namespace {

std::string Join(const std::vector<int>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s;
}

std::string SelfDir() {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec) throw RuntimeFailure("cannot locate k3-launch: " + ec.message());
  return exe.parent_path().string();
}

struct Sampled {
  ProcMemory mem;
};

class Runner {
 public:
  Runner(const LaunchOptions& opt, const ModelLayout& m, const plan::MemoryPlan& p, const PromptInput& in)
      : opt_(opt), m_(m), plan_(p), in_(in) {}
  int Run();

 private:
  void Spawn();
  bool Pump(Clock::time_point deadline);  // one poll round; false on timeout
  void HandleControl(const ipc::Received<ipc::control::Message>& r);
  void HandleDeaths();
  void SendGenerate(const std::vector<int32_t>& ids);
  void Stop(const std::string& reason);
  void SampleMemory();
  void WriteReport(const std::vector<int32_t>& ids);
  std::vector<int32_t> EncodePrompt();  // through the tokenizer service
  void PrintText();                     // generated text decoded so far (text prompts)
  void FlushText();                     // waits for the end of the decode stream
  bool HintsSent() const { return HintsOffReason(opt_, m_, plan_) == nullptr; }

  const LaunchOptions& opt_;
  const ModelLayout& m_;
  const plan::MemoryPlan& plan_;
  const PromptInput& in_;
  Supervisor sup_;
  std::optional<RunResources> res_;  // arenas + endpoint names (run_resources.h)
  zmq::context_t ctx_{1};
  std::optional<zmq::socket_t> control_, compute_;
  std::optional<TokenizerClient> tok_;  // when a tokenizer is configured
  ipc::RejectCounter rejects_;
  std::map<std::string, std::map<std::string, double>> stats_;  // service -> latest Stats
  std::map<std::string, ProcMemory> peak_;
  std::vector<int32_t> generated_;
  std::vector<Clock::time_point> token_arrivals_;  // when each generated token reached the launcher
  std::optional<ipc::compute::RunStats> done_;
  int fatal_code_ = 0;
  std::string fatal_msg_;
  double run_seconds_ = 0;
};

void Runner::Spawn() {
  const std::string run = res_->ipc_name();  // abstract namespace: "ipc://@k3-<pid>-<random>/..."
  const std::string bin = SelfDir();
  const std::string pinned = res_->pinned.Spec(), ring = res_->ring.Spec(), experts = res_->experts.Spec();
  const std::string embed = res_->embed_window ? res_->embed_window->Spec() : "";
  const std::string control = "ipc://" + run + "/control";
  const std::string inflight = std::to_string(opt_.inflight);
  // What the plan streams, told to both ends: lm_head chunks through the ring, embedding
  // rows through the embed-window arena (docs/pipeline.md "Streamed embedding and lm_head").
  std::vector<std::string> head_flags;
  if (!plan_.lm_head_resident) head_flags.push_back("--stream-lm-head");
  if (!plan_.embed_resident) head_flags.insert(head_flags.end(), {"--embed-arena", embed});
  std::vector<std::string> t = {bin + "/k3-trunk-reader", "--model", opt_.model, "--control", control, "--bind",
                                "ipc://" + run + "/trunk", "--pinned-arena", pinned, "--ring-arena", ring,
                                "--pin", Join(plan_.pinned_layers), "--io", opt_.io, "--inflight", inflight};
  t.insert(t.end(), head_flags.begin(), head_flags.end());
  sup_.Add({"trunk-reader", t, true});
  std::vector<std::string> x = {bin + "/k3-expert-fetcher", "--model", opt_.model, "--control", control, "--bind",
                                "ipc://" + run + "/experts", "--arena", experts, "--io", opt_.io,
                                "--inflight", inflight};
  if (!opt_.dump_cache_trace.empty()) x.insert(x.end(), {"--dump-cache-trace", opt_.dump_cache_trace});
  if (!opt_.expert_server.empty()) {
    char timeout[32];
    std::snprintf(timeout, sizeof timeout, "%g", opt_.expert_server_timeout);
    x.insert(x.end(), {"--remote", opt_.expert_server, "--remote-timeout", timeout});
  }
  // Every expert has a slot: the fetcher reads them all ahead (nothing is ever evicted).
  if (AllExpertsResident(m_, plan_)) x.push_back("--warm");
  sup_.Add({"expert-fetcher", x, true});
  std::vector<std::string> c = {bin + "/k3-compute", "--pipeline", "--model", opt_.model,
                                "--control", control, "--endpoint", "ipc://" + run + "/compute",
                                "--trunk", "ipc://" + run + "/trunk", "--experts",
                                "ipc://" + run + "/experts", "--pinned-arena", pinned,
                                "--ring-arena", ring, "--experts-arena", experts};
  if (opt_.threads > 0) c.insert(c.end(), {"--threads", std::to_string(opt_.threads)});
  c.insert(c.end(), {"--expert-inputs", opt_.expert_inputs});
  if (opt_.probe_membw) c.push_back("--probe-membw");
  if (HintsSent()) c.push_back("--prefetch-hints");
  if (!opt_.dump_logits.empty()) c.insert(c.end(), {"--dump-logits", opt_.dump_logits});
  c.insert(c.end(), head_flags.begin(), head_flags.end());
  sup_.Add({"compute", c, false});
  if (!in_.tokenizer_dir.empty())
    sup_.Add({"tokenizer",
              {bin + "/k3-tokenizer", "serve", "--vocab", in_.tokenizer_dir, "--control", control, "--bind",
               "ipc://" + run + "/tokenizer"},
              true});
  for (const Service& s : sup_.services())
    if (::access(s.argv[0].c_str(), X_OK) != 0)
      throw RuntimeFailure("cannot start " + s.name + ": " + s.argv[0] + " is missing");
  for (Service& s : sup_.services()) s.inherit_fds = res_->FdsNamedIn(s.argv);
  for (size_t i = 0; i < sup_.services().size(); ++i) sup_.Start(i);
}

void Runner::HandleControl(const ipc::Received<ipc::control::Message>& r) {
  using namespace ipc::control;
  std::visit(
      [&](const auto& msg) {
        using T = std::decay_t<decltype(msg)>;
        if constexpr (std::is_same_v<T, Ready>) {
          for (Service& s : sup_.services())
            if (s.name == msg.service) {
              s.ready = true;
              // A restarted tokenizer lost what was in flight (and its stream state).
              if (s.name == "tokenizer" && s.restarts > 0 && tok_) tok_->Resend();
            }
          std::fprintf(stderr, "[launch] %s ready\n", msg.service.c_str());
          for (const Stat& st : msg.stats) stats_[msg.service]["ready_" + st.name] = st.value;
        } else if constexpr (std::is_same_v<T, Stats>) {
          for (const Stat& st : msg.stats) stats_[msg.service][st.name] = st.value;
        } else if constexpr (std::is_same_v<T, Dead>) {
          std::fprintf(stderr, "[launch] %s is dying (exit %d): %s\n", msg.service.c_str(), msg.exit_code,
                       msg.reason.c_str());
          for (Service& s : sup_.services())
            if (s.name == msg.service && !s.ready && msg.exit_code > 1 && fatal_code_ == 0) {
              fatal_code_ = msg.exit_code;  // failed at start-up: restarting will not help
              fatal_msg_ = msg.service + ": " + msg.reason;
            }
        }
      },
      r.message);
}

void Runner::HandleDeaths() {
  for (const Death& d : sup_.Reap()) {
    Service& s = sup_.services()[d.index];
    const std::string what = d.Describe(s.name);
    if (fatal_code_ != 0) continue;
    if (s.name == "compute" || !s.restartable) {
      fatal_code_ = kExitRuntime;
      fatal_msg_ = what;
      std::fprintf(stderr, "[launch] %s\n", what.c_str());
      continue;
    }
    if (s.restarts >= 5) {
      fatal_code_ = kExitRuntime;
      fatal_msg_ = what + " (restarted 5 times already)";
      continue;
    }
    ++s.restarts;
    std::fprintf(stderr, "[launch] %s; restarting it\n", what.c_str());
    sup_.Start(d.index);
  }
}

bool Runner::Pump(Clock::time_point deadline) {
  zmq::pollitem_t items[] = {{control_->handle(), 0, ZMQ_POLLIN, 0},
                             {compute_->handle(), 0, ZMQ_POLLIN, 0},
                             {nullptr, sup_.wake_fd(), ZMQ_POLLIN, 0},
                             {tok_ ? tok_->socket().handle() : nullptr, -1, ZMQ_POLLIN, 0}};
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  const long ms = std::clamp<long>(static_cast<long>(left.count()), 0, 200);
  try {
    zmq::poll(items, tok_ ? 4 : 3, std::chrono::milliseconds(ms));
  } catch (const zmq::error_t& e) {
    if (e.num() != EINTR) throw RuntimeFailure(std::string("zmq poll: ") + e.what());
  }
  if (items[2].revents & ZMQ_POLLIN) sup_.DrainWake();
  HandleDeaths();
  const auto now = Clock::now();
  while (auto r = ipc::ReceiveVerified(*control_, true, ipc::DecodeControl, now, rejects_)) HandleControl(*r);
  while (auto r = ipc::ReceiveVerified(*compute_, true, ipc::DecodeCompute, now, rejects_)) {
    if (const auto* t = std::get_if<ipc::compute::Token>(&r->message)) {
      if (t->index == static_cast<int32_t>(generated_.size())) {
        generated_.push_back(t->id);
        token_arrivals_.push_back(Clock::now());
        if (tok_) tok_->PushIds({t->id});
        if (!(tok_ && in_.has_text)) {  // ids in, ids out; text prompts get text (PrintText)
          std::printf("%d\n", t->id);
          std::fflush(stdout);
        }
      }
    } else if (const auto* d = std::get_if<ipc::compute::Done>(&r->message)) {
      done_ = d->stats;
    }
  }
  if (tok_) {
    tok_->Drain(rejects_);
    PrintText();
  }
  return Clock::now() < deadline;
}

void Runner::SendGenerate(const std::vector<int32_t>& ids) {
  ipc::compute::Generate g;
  g.request_id = 1;
  g.ids = ids;
  g.gen = static_cast<int32_t>(opt_.gen);
  g.full_recompute = opt_.full_recompute;
  g.prefill_chunk = static_cast<int32_t>(opt_.prefill_chunk);
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  for (;;) {  // the compute DEALER may not be known to the ROUTER yet (ROUTER_MANDATORY)
    try {
      ipc::SendMessage(*compute_, ipc::Encode(g), {}, "compute");
      return;
    } catch (const Error&) {
      if (Clock::now() > deadline) throw RuntimeFailure("compute never connected to the compute endpoint");
      Pump(Clock::now() + std::chrono::milliseconds(20));
      if (fatal_code_) return;
    }
  }
}

void Runner::SampleMemory() {
  for (const Service& s : sup_.services()) {
    if (s.pid <= 0) continue;
    const ProcMemory m = ReadProcMemory(s.pid);
    ProcMemory& p = peak_[s.name];
    p.vm_hwm = std::max(p.vm_hwm, m.vm_hwm);
    p.rss_shmem = std::max(p.rss_shmem, m.rss_shmem);
  }
  const ProcMemory self = ReadProcMemory(::getpid());
  peak_["launcher"] = self;
}

void Runner::Stop(const std::string& reason) {
  SampleMemory();
  for (const Service& s : sup_.services()) {
    if (s.pid <= 0) continue;
    try {
      ipc::SendMessage(*control_, ipc::Encode(ipc::control::Shutdown{reason}), {}, s.name);
    } catch (const Error&) {
      // not connected (yet): SIGTERM below takes care of it
    }
  }
  const auto deadline = Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(opt_.shutdown_timeout * 1000));
  while (sup_.AnyRunning() && Clock::now() < deadline) {
    zmq::pollitem_t items[] = {{control_->handle(), 0, ZMQ_POLLIN, 0}, {nullptr, sup_.wake_fd(), ZMQ_POLLIN, 0}};
    try {
      zmq::poll(items, 2, std::chrono::milliseconds(20));
    } catch (const zmq::error_t&) {
    }
    sup_.DrainWake();
    sup_.Reap();
    while (auto r = ipc::ReceiveVerified(*control_, true, ipc::DecodeControl, Clock::now(), rejects_))
      HandleControl(*r);
  }
  sup_.KillAll(std::chrono::milliseconds(2000));
}

void Runner::PrintText() {
  if (!in_.has_text) return;
  const std::string t = tok_->TakeNewText();
  if (t.empty()) return;
  std::fwrite(t.data(), 1, t.size(), stdout);
  std::fflush(stdout);
}

std::vector<int32_t> Runner::EncodePrompt() {
  tok_->StartEncode(in_.text);
  const auto deadline = Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(opt_.ready_timeout * 1000));
  while (!tok_->encoded() && tok_->failure().empty() && !fatal_code_ && !sup_.interrupted())
    if (!Pump(deadline)) throw RuntimeFailure("the tokenizer did not encode the prompt in time");
  if (!tok_->failure().empty()) throw BadInput("tokenizer: " + tok_->failure());
  if (!tok_->encoded()) return {};  // fatal or interrupted: the caller stops
  const std::vector<int32_t> ids = *tok_->encoded();
  if (ids.empty()) throw BadInput("the prompt encodes to no tokens");
  for (int32_t id : ids)
    if (id < 0 || id >= m_.cfg.vocab_size)
      throw BadInput("tokenizer id " + std::to_string(id) + " is outside the model's vocabulary [0," +
                     std::to_string(m_.cfg.vocab_size) + ")");
  std::fprintf(stderr, "[launch] prompt: %zu tokens\n", ids.size());
  return ids;
}

void Runner::FlushText() {
  tok_->FinishStream();
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  while (!tok_->stream_done() && tok_->failure().empty() && !fatal_code_ && !sup_.interrupted())
    if (!Pump(deadline)) break;
  if (!tok_->failure().empty())
    std::fprintf(stderr, "[launch] warning: generated ids not decoded: %s\n", tok_->failure().c_str());
  else if (!tok_->stream_done())
    std::fprintf(stderr, "[launch] warning: the tokenizer did not finish decoding in time\n");
}

int Runner::Run() {
  std::vector<int32_t> ids = in_.ids;
  ipc::CleanupDeadLaunchers();  // /dev/shm names left by k3 versions before memfd arenas
  res_.emplace(SizeArenas(m_, plan_));  // nothing of it outlives the run (run_resources.h)

  control_.emplace(ctx_, zmq::socket_type::router);
  compute_.emplace(ctx_, zmq::socket_type::router);
  for (auto* s : {&*control_, &*compute_}) {
    s->set(zmq::sockopt::router_mandatory, 1);
    s->set(zmq::sockopt::router_handover, 1);  // a restarted service takes over its identity
    s->set(zmq::sockopt::linger, 0);
  }
  ipc::BindPrivate(*control_, res_->Endpoint("control"));
  ipc::BindPrivate(*compute_, res_->Endpoint("compute"));
  if (!in_.tokenizer_dir.empty()) tok_.emplace(ctx_, res_->Endpoint("tokenizer"));

  const auto t0 = Clock::now();
  int code = kExitOk;
  std::string stop_reason = "run finished";
  try {
    Spawn();
    const auto ready_deadline = t0 + std::chrono::milliseconds(static_cast<int64_t>(opt_.ready_timeout * 1000));
    auto all_ready = [&] {
      return std::all_of(sup_.services().begin(), sup_.services().end(), [](const Service& s) { return s.ready; });
    };
    while (!all_ready() && !fatal_code_ && !sup_.interrupted())
      if (!Pump(ready_deadline)) throw RuntimeFailure("services not ready after " + std::to_string(opt_.ready_timeout) + " s");
    if (!fatal_code_ && !sup_.interrupted()) {
      std::fprintf(stderr, "[launch] all services ready in %.2f s; generating\n",
                   std::chrono::duration<double>(Clock::now() - t0).count());
      if (in_.has_text) ids = EncodePrompt();
      if (!ids.empty()) SendGenerate(ids);
    }
    const auto t1 = Clock::now();
    auto last_sample = Clock::now();
    while (!done_ && !fatal_code_ && !sup_.interrupted()) {
      Pump(Clock::now() + std::chrono::milliseconds(200));
      if (Clock::now() - last_sample > std::chrono::milliseconds(250)) {
        SampleMemory();
        last_sample = Clock::now();
      }
    }
    run_seconds_ = std::chrono::duration<double>(Clock::now() - t1).count();
    if (done_) {
      // Compute sends its Stats right before Done; give the message a moment to arrive.
      Pump(Clock::now() + std::chrono::milliseconds(50));
      if (tok_) FlushText();
    }
    if (sup_.interrupted()) {
      code = kExitInterrupted;
      stop_reason = "interrupted";
    } else if (fatal_code_) {
      code = fatal_code_;
      stop_reason = fatal_msg_;
    }
  } catch (const Error& e) {
    Stop(e.what());
    throw;
  }
  Stop(stop_reason);
  if (code == kExitInterrupted) {
    std::fprintf(stderr, "k3-launch: interrupted; services stopped\n");
    return code;
  }
  if (code != kExitOk) throw Error(static_cast<ExitCode>(code), fatal_msg_);
  WriteReport(ids);
  return kExitOk;
}

void Runner::WriteReport(const std::vector<int32_t>& ids) {
  const double gen_n = static_cast<double>(std::max<size_t>(generated_.size(), 1));
  auto stat = [&](const std::string& svc, const std::string& name) -> double {
    auto it = stats_.find(svc);
    if (it == stats_.end()) return -1;
    auto jt = it->second.find(name);
    return jt == it->second.end() ? -1 : jt->second;
  };
  const double trunk_bytes = stat("trunk-reader", "bytes_read");
  const double expert_bytes = stat("expert-fetcher", "bytes_read");
  // Hits and misses are the fetcher's (compute cannot tell them apart).
  const double hits = std::max(0.0, stat("expert-fetcher", "hits"));
  const double misses = std::max(0.0, stat("expert-fetcher", "misses"));
  // Waits while this request ran (the run_ counters; start-up waits before Generate excluded).
  const double waits = std::max(0.0, stat("compute", "run_trunk_wait_seconds")) + std::max(0.0, stat("compute", "run_expert_wait_seconds"));
  nlohmann::json r;
  r["prompt_ids"] = ids;
  r["generated_ids"] = generated_;
  if (tok_ && tok_->stream_done()) r["generated_text"] = tok_->text();
  if (tok_ && !tok_->failure().empty()) r["tokenizer_error"] = tok_->failure();
  r["expert_inputs"] = opt_.expert_inputs;
  r["budget_bytes"] = plan_.budget;
  r["plan_total_bytes"] = plan_.total;
  r["seconds_per_token"] = done_ ? done_->seconds_per_token : 0.0;
  r["prefill_seconds"] = done_ ? done_->prefill_seconds : 0.0;
  // Per decode step, from token arrival times here: shows the spread the mean hides.
  std::vector<double> step_s;
  for (size_t i = 1; i < token_arrivals_.size(); ++i)
    step_s.push_back(std::chrono::duration<double>(token_arrivals_[i] - token_arrivals_[i - 1]).count());
  r["token_seconds"] = step_s;
  if (!step_s.empty()) r["median_token_seconds"] = Median(step_s);
  r["run_seconds"] = run_seconds_;
  r["trunk_bytes_read"] = trunk_bytes;
  r["expert_bytes_read"] = expert_bytes;
  r["trunk_bytes_per_token"] = trunk_bytes >= 0 ? trunk_bytes / gen_n : -1.0;
  r["expert_bytes_per_token"] = expert_bytes >= 0 ? expert_bytes / gen_n : -1.0;
  r["expert_hit_rate"] = hits + misses > 0 ? hits / (hits + misses) : -1.0;
  r["compute_wait_seconds"] = waits;
  r["io_share"] = run_seconds_ > 0 ? waits / run_seconds_ : 0.0;
  // Decode steps only (the prompt pass also waits for start-up reads): overlap per token.
  const double steps = stat("compute", "decode_steps");
  const double trunk_wait_tok = steps > 0 ? std::max(0.0, stat("compute", "decode_trunk_wait_seconds")) / steps : 0.0;
  const double expert_wait_tok = steps > 0 ? std::max(0.0, stat("compute", "decode_expert_wait_seconds")) / steps : 0.0;
  r["trunk_wait_seconds_per_token"] = trunk_wait_tok;
  r["expert_wait_seconds_per_token"] = expert_wait_tok;
  r["compute_wait_seconds_per_token"] = trunk_wait_tok + expert_wait_tok;
  // Next-layer guesses: how many of the routed experts they named, and the fetcher's reads.
  r["prefetch_hints"] = HintsSent();
  r["hint_recall"] = stat("compute", "hint_recall");
  r["prefetch_reads"] = stat("expert-fetcher", "prefetch_reads");
  r["prefetch_used"] = stat("expert-fetcher", "prefetch_used");
  int64_t total = 0;
  nlohmann::json mem = nlohmann::json::object();
  for (const auto& [name, pm] : peak_) {
    mem[name] = {{"vm_hwm_bytes", pm.vm_hwm}, {"rss_shmem_bytes", pm.rss_shmem}};
    if (pm.vm_hwm > 0) total += pm.vm_hwm - std::max<int64_t>(pm.rss_shmem, 0);
  }
  const ArenaSizes sz = SizeArenas(m_, plan_);
  total += sz.pinned + sz.ring + sz.embed_window + sz.experts;  // shm counted once, at its full size
  r["peak_memory"] = mem;
  r["peak_memory_total_bytes"] = total;
  r["service_stats"] = stats_;
  r["restarts"] = nlohmann::json::object();
  for (const Service& s : sup_.services()) r["restarts"][s.name] = s.restarts;
  r["rejected_messages"] = rejects_.rejected;

  std::fprintf(stderr, "[launch] %zu tokens, %.4f s/token, prefill %.3f s\n", generated_.size(),
               r["seconds_per_token"].get<double>(), r["prefill_seconds"].get<double>());
  std::fprintf(stderr, "[launch] trunk %.0f B/token, experts %.0f B/token, expert hit rate %.3f, compute waited %.3f s (%.0f%% of the run)\n",
               r["trunk_bytes_per_token"].get<double>(), r["expert_bytes_per_token"].get<double>(),
               r["expert_hit_rate"].get<double>(), waits, 100 * r["io_share"].get<double>());
  std::fprintf(stderr, "[launch] compute waited on I/O %.4f s/token while decoding (trunk %.4f, experts %.4f) of %.4f s/token\n",
               trunk_wait_tok + expert_wait_tok, trunk_wait_tok, expert_wait_tok, r["seconds_per_token"].get<double>());
  if (HintsSent())
    std::fprintf(stderr, "[launch] next-layer expert hints: recall %.3f, %.0f experts read ahead, %.0f of them then requested\n",
                 r["hint_recall"].get<double>(), r["prefetch_reads"].get<double>(), r["prefetch_used"].get<double>());
  if (stat("compute", "membw_probe_passes") > 0)
    std::fprintf(stderr, "[launch] read-bandwidth probe over the resident weights: median %.1f GB/s; median decode step %.4f s (compute's clock, probes excluded)\n",
                 stat("compute", "membw_probe_median_gbs"), stat("compute", "median_step_seconds"));
  for (const auto& [name, pm] : peak_)
    std::fprintf(stderr, "[launch] peak %-15s %s (shm %s)\n", name.c_str(), plan::FormatBytes(pm.vm_hwm).c_str(),
                 plan::FormatBytes(pm.rss_shmem).c_str());
  std::fprintf(stderr, "[launch] peak total (shm once) %s of budget %s\n", plan::FormatBytes(total).c_str(),
               plan::FormatBytes(plan_.budget).c_str());
  if (!opt_.out.empty()) {
    std::ofstream f(opt_.out, std::ios::trunc);
    // generated_text may hold ill-formed UTF-8 (any ids can be generated): U+FFFD in JSON.
    f << r.dump(1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    f.close();
    if (!f) throw Error(kExitOutput, "--out: cannot write " + opt_.out);
  }
}

}  // namespace

bool AllExpertsResident(const ModelLayout& m, const plan::MemoryPlan& p) {
  return p.expert_slots >= m.cfg.routed_expert_count();
}

// Guesses pay off when experts are read during the run (not all resident), the arena has room
// for a second layer's experts next to the current one's (the fetcher checks too), and the
// whole trunk is pinned. With trunk layers streaming, the disk is never idle between expert
// demands and a wrong guess takes bandwidth the trunk needs: measured 2.5% slower with 2 of 4
// layers pinned, 10% faster with all pinned (docs/benchmarks.md, finding 21).
const char* HintsOffReason(const LaunchOptions& opt, const ModelLayout& m, const plan::MemoryPlan& p) {
  if (!opt.prefetch_hints) return "switched off";
  if (AllExpertsResident(m, p)) return "every expert has a slot";
  if (p.expert_slots < 2 * m.cfg.top_k) return "fewer than 2 x top_k expert slots";
  if (static_cast<int64_t>(p.pinned_layers.size()) < m.cfg.num_layers) return "trunk layers stream";
  return nullptr;
}

int RunPipeline(const LaunchOptions& opt, const ModelLayout& m, const plan::MemoryPlan& p,
                const PromptInput& prompt) {
  Runner r(opt, m, p, prompt);
  return r.Run();
}

}  // namespace k3::launch
