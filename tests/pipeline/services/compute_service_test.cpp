// k3-compute --pipeline as a real process with the real trunk reader and expert fetcher, driven
// by a fake launcher: the message contract of docs/pipeline.md "k3-compute --pipeline".
// Stop ids end the generation (Done says StopId); a Shutdown during a request ends it within
// 1 s with Stats, then Done{Interrupted} counting the tokens sent, then exit 5; a Shutdown
// between requests is exit 0; prefill progress arrives as control Stats.
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <fstream>
#include <iterator>
#include <map>
#include <optional>
#include <thread>
#include <vector>

#include "common/model_config.h"
#include "common/safetensors.h"
#include "common/tensor_names.h"
#include "service_harness.h"

namespace k3::test {
namespace {

namespace cp = ipc::compute;
constexpr int kRingSlots = 3;

class ComputeServiceTest : public ::testing::Test {
 protected:
  // Trunk layers the reader pins ("" streams every layer through the ring), and what compute
  // gets beyond the common flags (BatchedComputeTest).
  virtual std::string Pins() const { return ""; }
  virtual std::vector<std::string> ComputeFlags() const { return {}; }
  void SetUp() override {
    size_t pinned = 0;
    for (const auto& p : ck_.shard_paths()) pinned += fs::file_size(p) + 8192;
    uint64_t ring_slot = 0, expert_slot = 0;
    for (int l = 0; l < cfg_.num_layers; ++l) {
      const ByteRange r = LayerTrunkRange(ck_, cfg_, l);
      ring_slot = std::max<uint64_t>(ring_slot, r.end - r.begin + 8192);
    }
    for (int l = static_cast<int>(cfg_.first_k_dense_replace); l < cfg_.num_layers; ++l)
      for (int e = 0; e < cfg_.num_experts; ++e) {
        const ByteRange r = ExpertRange(ck_, l, e);
        expert_slot = std::max<uint64_t>(expert_slot, (r.end - r.begin + 2 * 4096) / 4096 * 4096);
      }
    const auto slots = static_cast<uint32_t>(cfg_.routed_expert_count());
    pinned_ = ipc::ShmArena::Create(launcher_.ArenaName("trunk-pinned"), pinned);
    ring_ = ipc::ShmArena::Create(launcher_.ArenaName("trunk-ring"), ipc::SlotTable::BytesNeeded(kRingSlots, ring_slot));
    ipc::SlotTable::Format(ring_, kRingSlots, ring_slot);
    experts_ = ipc::ShmArena::Create(launcher_.ArenaName("experts"), ipc::SlotTable::BytesNeeded(slots, expert_slot));
    ipc::SlotTable::Format(experts_, slots, expert_slot);
    compute_ep_.set(zmq::sockopt::linger, 0);
    compute_ep_.set(zmq::sockopt::router_handover, 1);  // a restarted compute takes its identity over
    compute_ep_.set(zmq::sockopt::router_mandatory, 1);  // an unknown peer is an error, not a drop
    compute_ep_.bind(launcher_.Endpoint("compute"));

    reader_ = Child({K3_TRUNK_READER, "--model", model_, "--control", launcher_.Endpoint("control"), "--bind",
                     launcher_.Endpoint("trunk"), "--pinned-arena", pinned_.name(), "--ring-arena", ring_.name(),
                     "--pin", Pins(), "--io", "pread"},
                    launcher_.StderrPath("trunk-reader"));
    ASSERT_TRUE(launcher_.WaitReady("trunk-reader")) << launcher_.ReadStderr("trunk-reader");
    fetcher_ = Child({K3_EXPERT_FETCHER, "--model", model_, "--control", launcher_.Endpoint("control"), "--bind",
                      launcher_.Endpoint("experts"), "--arena", experts_.name(), "--io", "pread"},
                     launcher_.StderrPath("expert-fetcher"));
    ASSERT_TRUE(launcher_.WaitReady("expert-fetcher")) << launcher_.ReadStderr("expert-fetcher");
    StartCompute({});
  }
  // Compute with the common flags, ComputeFlags() and `extra`.
  void StartCompute(const std::vector<std::string>& extra) {
    std::vector<std::string> argv = {K3_COMPUTE, "--pipeline", "--model", model_, "--control",
                                     launcher_.Endpoint("control"), "--endpoint", launcher_.Endpoint("compute"), "--trunk",
                                     launcher_.Endpoint("trunk"), "--experts", launcher_.Endpoint("experts"),
                                     "--pinned-arena", pinned_.name(), "--ring-arena", ring_.name(), "--experts-arena",
                                     experts_.name(), "--threads", "1"};
    for (const std::string& f : ComputeFlags()) argv.push_back(f);
    argv.insert(argv.end(), extra.begin(), extra.end());
    compute_ = Child(argv, launcher_.StderrPath("compute"));
    ASSERT_TRUE(launcher_.WaitReady("compute")) << launcher_.ReadStderr("compute");
  }
  // A Shutdown between requests (exit 0), then a new compute with `extra` flags on the same
  // trunk reader and fetcher.
  void RestartCompute(const std::vector<std::string>& extra) {
    launcher_.Shutdown("compute");
    ASSERT_EQ(compute_.Wait(10s), 0) << launcher_.ReadStderr("compute");
    StartCompute(extra);
  }
  void TearDown() override {
    compute_.Kill9();
    reader_.Kill9();
    fetcher_.Kill9();
    pinned_.Unlink();
    ring_.Unlink();
    experts_.Unlink();
  }

  // Until the ROUTER knows compute's DEALER (ROUTER_MANDATORY refuses before): Ready comes on
  // the control socket, and under load the compute socket's handshake can still be under way;
  // without the retry the Generate was dropped and the test waited 60 s for nothing.
  void Send(const cp::Generate& g) {
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    for (;;) {
      try {
        ipc::SendMessage(compute_ep_, ipc::Encode(g), {}, "compute");
        return;
      } catch (const std::exception&) {
        if (std::chrono::steady_clock::now() > deadline) throw;
        std::this_thread::sleep_for(10ms);
      }
    }
  }
  // A greedy Generate with the fields these tests vary.
  void Send(uint64_t id, std::vector<int32_t> ids, int32_t gen, bool full_recompute, int32_t chunk,
            std::vector<int32_t> stop_ids) {
    cp::Generate g;
    g.request_id = id;
    g.ids = std::move(ids);
    g.gen = gen;
    g.full_recompute = full_recompute;
    g.prefill_chunk = chunk;
    g.stop_ids = std::move(stop_ids);
    Send(g);
  }
  std::optional<cp::Message> Next(std::chrono::milliseconds timeout = 60s) {
    auto r = ipc::ReceiveVerified(compute_ep_, true, ipc::DecodeCompute, ipc::Clock::now() + timeout, rejects_);
    if (!r) return std::nullopt;
    return r->message;
  }
  // Tokens until Done (nullopt: none within the timeout).
  std::optional<cp::Done> Collect(std::vector<int32_t>& ids) {
    for (;;) {
      auto m = Next();
      if (!m) return std::nullopt;
      if (const auto* t = std::get_if<cp::Token>(&*m)) ids.push_back(t->id);
      if (const auto* s = std::get_if<cp::Step>(&*m)) steps_.push_back(*s);
      if (const auto* d = std::get_if<cp::Done>(&*m)) return *d;
    }
  }
  // Control Stats from compute until one has `name` (all of them, in arrival order).
  std::vector<std::map<std::string, double>> StatsUntil(const std::string& name) {
    std::vector<std::map<std::string, double>> out;
    while (auto m = launcher_.Control(10s)) {
      if (const auto* s = std::get_if<ipc::control::Stats>(&m->message); s && s->service == "compute") {
        std::map<std::string, double> one;
        for (const auto& st : s->stats) one[st.name] = st.value;
        out.push_back(one);
        if (one.count(name)) break;
      }
    }
    return out;
  }

  FakeLauncher launcher_;
  std::string model_ = TinyCheckpoint();
  Checkpoint ck_ = Checkpoint::Open(model_);
  ModelConfig cfg_ = LoadModelConfig(model_ + "/config.json");
  ipc::ShmArena pinned_, ring_, experts_;
  zmq::socket_t compute_ep_{launcher_.ctx(), zmq::socket_type::router};
  ipc::RejectCounter rejects_;
  std::vector<cp::Step> steps_;  // what Collect saw
  Child reader_, fetcher_, compute_;
};

TEST_F(ComputeServiceTest, StopIdsEndTheGenerationAndDoneSaysSo) {
  Send(1, {1, 5, 9, 200, 77, 3, 18, 42}, 10, false, 0, {});
  std::vector<int32_t> full;
  auto d = Collect(full);
  ASSERT_TRUE(d) << launcher_.ReadStderr("compute");
  EXPECT_EQ(d->reason, cp::StopReason::kLength);
  ASSERT_EQ(full.size(), 10u);
  // One Step per pass, also at max_batch 1: the prompt pass, then 9 one-row decode passes.
  ASSERT_EQ(steps_.size(), 10u);
  EXPECT_EQ(steps_[0].rows, 8);
  EXPECT_EQ(steps_[0].prefill_rows, 8);
  for (const cp::Step& s : steps_) {
    EXPECT_EQ(s.sequences, 1);
    EXPECT_EQ(s.request_ids, std::vector<uint64_t>{1});
    EXPECT_GT(s.experts, 0);
    EXPECT_EQ(s.trunk_bytes, steps_[0].trunk_bytes);
  }
  EXPECT_EQ(steps_[9].rows, 1);
  EXPECT_EQ(steps_[9].prefill_rows, 0);
  int64_t trunk = 0;  // every layer's trunk tensors, from the shard headers
  for (int l = 0; l < cfg_.num_layers; ++l) trunk += LayerTrunkRange(ck_, cfg_, l).tensor_bytes;
  EXPECT_EQ(steps_[0].trunk_bytes, trunk);
  size_t first = 0;
  while (full[first] != full[4]) ++first;
  Send(2, {1, 5, 9, 200, 77, 3, 18, 42}, 10, false, 0, {full[4]});
  std::vector<int32_t> got;
  d = Collect(got);
  ASSERT_TRUE(d);
  EXPECT_EQ(d->request_id, 2u);
  EXPECT_EQ(d->reason, cp::StopReason::kStopId);
  EXPECT_EQ(d->stats.generated_tokens, static_cast<int32_t>(first + 1));
  EXPECT_EQ(got, std::vector<int32_t>(full.begin(), full.begin() + static_cast<long>(first) + 1));
  // A Shutdown between requests is a normal end.
  launcher_.Shutdown("compute");
  EXPECT_EQ(compute_.Wait(10s), 0) << launcher_.ReadStderr("compute");
}

TEST_F(ComputeServiceTest, ShutdownDuringARequestSendsStatsThenDoneAndExits5WithinOneSecond) {
  Send(7, {1, 5, 9, 200, 77, 3, 18, 42}, 1000000, false, 0, {});
  std::vector<int32_t> ids;
  while (ids.size() < 5) {
    auto m = Next();
    ASSERT_TRUE(m) << launcher_.ReadStderr("compute");
    if (const auto* t = std::get_if<cp::Token>(&*m)) ids.push_back(t->id);
  }
  const auto t0 = std::chrono::steady_clock::now();
  launcher_.Shutdown("compute");
  auto d = Collect(ids);
  ASSERT_TRUE(d);
  const int code = compute_.Wait(5s);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(code, 5) << launcher_.ReadStderr("compute");
  EXPECT_LT(took, 1.0);
  EXPECT_EQ(d->request_id, 7u);
  EXPECT_EQ(d->reason, cp::StopReason::kInterrupted);
  EXPECT_EQ(d->stats.generated_tokens, static_cast<int32_t>(ids.size()));
  EXPECT_EQ(d->stats.prompt_tokens, 8);
  // The request's Stats (the full set, as for a finished request) were sent before Done.
  auto stats = StatsUntil("decode_steps");
  ASSERT_FALSE(stats.empty());
  EXPECT_EQ(stats.back().at("decode_steps"), static_cast<double>(ids.size() - 1));
  EXPECT_TRUE(stats.back().count("expert_wait_seconds"));
}

// Waiting for weights is a safe point too: with the trunk reader stopped (SIGSTOP) compute
// sits in its wait for the next ring layer, and a stop signal still ends it within 1 s.
TEST_F(ComputeServiceTest, StopSignalWhileWaitingForWeightsEndsTheRequest) {
  Send(8, {1, 5, 9, 200, 77, 3, 18, 42}, 1000000, false, 0, {});
  std::vector<int32_t> ids;
  while (ids.size() < 3) {
    auto m = Next();
    ASSERT_TRUE(m) << launcher_.ReadStderr("compute");
    if (const auto* t = std::get_if<cp::Token>(&*m)) ids.push_back(t->id);
  }
  ASSERT_EQ(::kill(reader_.pid(), SIGSTOP), 0);
  std::this_thread::sleep_for(300ms);  // compute is now waiting for a layer
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_EQ(::kill(compute_.pid(), SIGTERM), 0);
  auto d = Collect(ids);
  const int code = compute_.Wait(5s);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ::kill(reader_.pid(), SIGCONT);
  ASSERT_TRUE(d);
  EXPECT_EQ(d->reason, cp::StopReason::kInterrupted);
  EXPECT_EQ(d->stats.generated_tokens, static_cast<int32_t>(ids.size()));
  EXPECT_EQ(code, 5) << launcher_.ReadStderr("compute");
  EXPECT_LT(took, 1.0);
}

// Cancel{request_id} (issue 13): compute looks at its launcher socket between steps. A Cancel
// for the running request ends it (Done Cancelled, the tokens sent so far); a Cancel for any
// other request is ignored; a Generate that arrives during a request is answered after it.
TEST_F(ComputeServiceTest, CancelEndsTheRunningRequestOnly) {
  const std::vector<int32_t> prompt = {1, 5, 9, 200, 77, 3, 18, 42};
  Send(11, prompt, 1000000, false, 0, {});
  std::vector<int32_t> ids;
  while (ids.size() < 3) {
    auto m = Next();
    ASSERT_TRUE(m) << launcher_.ReadStderr("compute");
    if (const auto* t = std::get_if<cp::Token>(&*m)) ids.push_back(t->id);
  }
  ipc::SendMessage(compute_ep_, ipc::Encode(cp::Cancel{99}), {}, "compute");  // not this request
  Send(12, prompt, 4, false, 0, {});  // waits for request 11
  ipc::SendMessage(compute_ep_, ipc::Encode(cp::Cancel{11}), {}, "compute");
  std::vector<int32_t> tail;
  auto d = Collect(tail);
  ASSERT_TRUE(d) << launcher_.ReadStderr("compute");
  EXPECT_EQ(d->request_id, 11u);
  EXPECT_EQ(d->reason, cp::StopReason::kCancelled);
  EXPECT_EQ(d->stats.generated_tokens, static_cast<int32_t>(ids.size() + tail.size()));
  EXPECT_LT(d->stats.generated_tokens, 1000);
  // The Generate that came during request 11 was kept and is answered now, in full.
  std::vector<int32_t> second;
  d = Collect(second);
  ASSERT_TRUE(d) << launcher_.ReadStderr("compute");
  EXPECT_EQ(d->request_id, 12u);
  EXPECT_EQ(d->reason, cp::StopReason::kLength);
  ASSERT_EQ(second.size(), 4u);
  // Greedy from the same prompt: the same first tokens as request 11.
  EXPECT_EQ(std::vector<int32_t>(second.begin(), second.begin() + 3), std::vector<int32_t>(ids.begin(), ids.begin() + 3));
  // A Cancel for a request that has ended changes nothing.
  ipc::SendMessage(compute_ep_, ipc::Encode(cp::Cancel{12}), {}, "compute");
  Send(13, prompt, 2, false, 0, {});
  std::vector<int32_t> third;
  d = Collect(third);
  ASSERT_TRUE(d);
  EXPECT_EQ(d->request_id, 13u);
  EXPECT_EQ(d->reason, cp::StopReason::kLength);
  EXPECT_EQ(third.size(), 2u);
}

// Generate.max_positions: prompt + generated never exceed it (Done says Length); a prompt
// longer than it is refused (exit 7, the two numbers named).
TEST_F(ComputeServiceTest, MaxPositionsBoundsTheGeneration) {
  cp::Generate g;
  g.request_id = 21;
  g.ids = {1, 5, 9, 200, 77, 3, 18, 42};
  g.gen = 100;
  g.max_positions = 12;
  Send(g);
  std::vector<int32_t> ids;
  auto d = Collect(ids);
  ASSERT_TRUE(d) << launcher_.ReadStderr("compute");
  EXPECT_EQ(d->reason, cp::StopReason::kLength);
  EXPECT_EQ(ids.size(), 4u);
  g.request_id = 22;
  g.max_positions = 7;
  Send(g);
  EXPECT_EQ(compute_.Wait(10s), 7);
  const std::string err = launcher_.ReadStderr("compute");
  EXPECT_NE(err.find("8 tokens"), std::string::npos) << err;
  EXPECT_NE(err.find("max_positions 7"), std::string::npos) << err;
}

TEST_F(ComputeServiceTest, PrefillProgressArrivesAsStats) {
  std::vector<int32_t> prompt;
  for (int i = 0; i < 200; ++i) prompt.push_back((i * 37 + 5) % 250);
  Send(3, prompt, 1, false, 8, {});
  std::vector<int32_t> ids;
  ASSERT_TRUE(Collect(ids));
  auto stats = StatsUntil("decode_steps");
  std::vector<double> done;
  for (const auto& s : stats)
    if (s.count("prefill_tokens_done")) {
      EXPECT_EQ(s.at("prefill_tokens_total"), 200);
      done.push_back(s.at("prefill_tokens_done"));
    }
  ASSERT_FALSE(done.empty());
  EXPECT_EQ(done.back(), 200);  // always one for the last chunk
  EXPECT_TRUE(std::is_sorted(done.begin(), done.end()));
  EXPECT_LE(done.size(), 25u);  // at most one per chunk of 8
}

// State files and keep_state (issue 13): a kept sequence continues exactly like one Generate of
// the whole sequence; Save / Load / Reset answer StateDone; a refused file leaves the sequence
// as it was and compute stays up.
TEST_F(ComputeServiceTest, KeepStateAndStateOpsContinueTheSequenceExactly) {
  auto state_op = [&](uint64_t id, cp::StateAction action, const std::string& path, const std::string& extra) {
    cp::StateOp op;
    op.request_id = id;
    op.action = action;
    op.path = path;
    op.extra = extra;
    ipc::SendMessage(compute_ep_, ipc::Encode(op), {}, "compute");
    for (;;) {
      auto m = Next();
      if (!m) return std::optional<cp::StateDone>();
      if (const auto* d = std::get_if<cp::StateDone>(&*m)) return std::optional<cp::StateDone>(*d);
    }
  };
  auto generate = [&](uint64_t id, const std::vector<int32_t>& ids, int32_t gen, bool keep, bool recompute = false) {
    cp::Generate g;
    g.full_recompute = recompute;
    g.request_id = id;
    g.ids = ids;
    g.gen = gen;
    g.keep_state = keep;
    Send(g);
    std::vector<int32_t> out;
    auto d = Collect(out);
    EXPECT_TRUE(d) << launcher_.ReadStderr("compute");
    EXPECT_EQ(d ? d->stats.prompt_tokens : -1, static_cast<int32_t>(ids.size()));
    return std::make_pair(out, d ? d->stats.position : -1);
  };
  const std::vector<int32_t> p1 = {1, 5, 9, 200, 77, 3, 18, 42}, p2 = {64, 2, 150};
  const fs::path dir = fs::path(K3_SVC_SCRATCH) / ("state-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string saved = (dir / "a.k3state").string(), bad = (dir / "bad.k3state").string();

  const auto [g1, pos1] = generate(1, p1, 4, false);
  EXPECT_EQ(pos1, 12);
  std::vector<int32_t> seq = p1;
  seq.insert(seq.end(), g1.begin(), g1.end());
  auto d = state_op(2, cp::StateAction::kSave, saved, "history");
  ASSERT_TRUE(d && d->ok) << (d ? d->error : launcher_.ReadStderr("compute"));
  EXPECT_EQ(d->request_id, 2u);
  EXPECT_EQ(d->ids, seq);
  EXPECT_EQ(d->position, 12);
  // Kept: P2 after P1 + gen; the same as one fresh Generate of the whole sequence.
  const auto [g2, pos2] = generate(3, p2, 3, true);
  EXPECT_EQ(pos2, 12 + 3 + 3);
  std::vector<int32_t> whole = seq;
  whole.insert(whole.end(), p2.begin(), p2.end());
  EXPECT_EQ(generate(4, whole, 3, false).first, g2);
  // Loaded: the same again; its extra bytes come back.
  d = state_op(5, cp::StateAction::kLoad, saved, "");
  ASSERT_TRUE(d && d->ok) << (d ? d->error : "");
  EXPECT_EQ(d->ids, seq);
  EXPECT_EQ(d->extra, "history");
  // A corrupt file is refused with one line and changes nothing.
  std::string bytes;
  {
    std::ifstream f(saved, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(f), {});
  }
  bytes[bytes.size() / 2] ^= 0x40;
  {
    std::ofstream f(bad, std::ios::binary);
    f << bytes;
  }
  d = state_op(6, cp::StateAction::kLoad, bad, "");
  ASSERT_TRUE(d);
  EXPECT_FALSE(d->ok);
  EXPECT_NE(d->error.find("checksum"), std::string::npos) << d->error;
  EXPECT_EQ(d->error.find('\n'), std::string::npos);
  EXPECT_EQ(d->ids, seq);
  EXPECT_EQ(generate(7, p2, 3, true).first, g2);
  // full_recompute on a kept sequence recomputes all of it: the same ids again.
  d = state_op(11, cp::StateAction::kLoad, saved, "");
  ASSERT_TRUE(d && d->ok);
  EXPECT_EQ(generate(12, p2, 3, true, true).first, g2);
  // Saving where it cannot be written: ok = false, compute stays up.
  d = state_op(8, cp::StateAction::kSave, (dir / "missing" / "x").string(), "");
  ASSERT_TRUE(d);
  EXPECT_FALSE(d->ok);
  // Reset: an empty sequence; keep_state from it equals a fresh run.
  d = state_op(9, cp::StateAction::kReset, "", "");
  ASSERT_TRUE(d && d->ok);
  EXPECT_EQ(d->position, 0);
  EXPECT_TRUE(d->ids.empty());
  EXPECT_EQ(generate(10, p1, 4, true).first, g1);
  launcher_.Shutdown("compute");
  EXPECT_EQ(compute_.Wait(10s), 0) << launcher_.ReadStderr("compute");
  fs::remove_all(dir);
}

// --max-batch 3 (docs/pipeline.md "Batched steps"), with the trunk streamed through the ring
// or every layer pinned: four Generates sent at once, each with its own prompt, sampling,
// seed, length and prompt chunk; three run together and the fourth joins when one ends; one
// is cancelled mid-batch. Every request gets exactly the ids it gets alone (computed by the
// unbatched full-recompute path, RunGreedy), and each pass reports one Step.
class BatchedComputeTest : public ComputeServiceTest, public ::testing::WithParamInterface<bool> {
 protected:
  std::string Pins() const override {
    if (!GetParam()) return "";
    std::string all;
    for (int l = 0; l < cfg_.num_layers; ++l) {
      if (l > 0) all.push_back(',');
      all.append(std::to_string(l));
    }
    return all;
  }
  std::vector<std::string> ComputeFlags() const override { return {"--max-batch", "3"}; }

  static std::vector<cp::Generate> Requests() {
    std::vector<cp::Generate> out(4);
    out[0].ids = {1, 5, 9, 200, 77, 3, 18, 42};
    out[0].gen = 14;
    out[1].ids = {7, 7, 300, 2, 11};
    out[1].gen = 9;
    out[1].sampling.temperature = 0.9f;
    out[1].sampling.top_p = 0.9f;
    out[1].sampling.seed = 1234;
    out[1].prefill_chunk = 2;
    out[2].ids = {1, 5, 9, 200, 77, 3, 18, 42, 4, 4, 90, 17, 60, 61, 62, 63, 64};
    out[2].gen = 40;  // cancelled after a few tokens
    out[2].sampling.temperature = 1.2f;
    out[2].sampling.seed = 99;
    out[2].sampling.frequency_penalty = 0.5f;
    out[2].prefill_chunk = 5;
    out[3].ids = {13, 8, 21};
    out[3].gen = 6;
    out[3].sampling.temperature = 0.7f;
    out[3].sampling.top_k = 20;
    out[3].sampling.seed = 5;
    for (size_t i = 0; i < out.size(); ++i) out[i].request_id = 100 + i;
    return out;
  }
};

TEST_P(BatchedComputeTest, ConcurrentRequestsGetExactlyTheirSoloIds) {
  const auto reqs = Requests();
  // Alone: one at a time through RunGreedy (full_recompute is never batched).
  std::map<uint64_t, std::vector<int32_t>> solo;
  for (cp::Generate g : reqs) {
    g.request_id += 1000;
    g.full_recompute = true;
    Send(g);
    std::vector<int32_t> ids;
    auto d = Collect(ids);
    ASSERT_TRUE(d) << launcher_.ReadStderr("compute");
    ASSERT_EQ(d->reason, cp::StopReason::kLength);
    ASSERT_EQ(static_cast<int32_t>(ids.size()), g.gen);
    solo[g.request_id - 1000] = ids;
    // Alone through RunGreedy: one Step per pass too (each step recomputes the whole sequence).
    EXPECT_GE(static_cast<int32_t>(steps_.size()), g.gen);
    for (const cp::Step& s : steps_) EXPECT_EQ(s.request_ids, std::vector<uint64_t>{g.request_id});
    steps_.clear();
  }
  // Together.
  for (const cp::Generate& g : reqs) Send(g);
  std::map<uint64_t, std::vector<int32_t>> got;
  std::map<uint64_t, cp::Done> done;
  std::vector<cp::Step> steps;
  bool cancel_sent = false;
  size_t at = 0, first_done = SIZE_MAX, first_fourth = SIZE_MAX;  // message positions
  while (done.size() < reqs.size()) {
    auto m = Next();
    ++at;
    ASSERT_TRUE(m) << launcher_.ReadStderr("compute");
    if (const auto* t = std::get_if<cp::Token>(&*m)) {
      auto& v = got[t->request_id];
      EXPECT_EQ(t->index, static_cast<int32_t>(v.size()));
      v.push_back(t->id);
      if (t->request_id == 102 && v.size() == 3 && !cancel_sent) {
        ipc::SendMessage(compute_ep_, ipc::Encode(cp::Cancel{102}), {}, "compute");
        cancel_sent = true;
      }
    } else if (const auto* st = std::get_if<cp::Step>(&*m)) {
      steps.push_back(*st);
      if (std::count(st->request_ids.begin(), st->request_ids.end(), 103u)) first_fourth = std::min(first_fourth, at);
    } else if (const auto* d = std::get_if<cp::Done>(&*m)) {
      done[d->request_id] = *d;
      first_done = std::min(first_done, at);
    }
  }
  for (uint64_t id : {100u, 101u, 103u}) {
    EXPECT_EQ(done[id].reason, cp::StopReason::kLength) << id;
    EXPECT_EQ(got[id], solo[id]) << "request " << id;
    EXPECT_EQ(done[id].stats.generated_tokens, static_cast<int32_t>(solo[id].size()));
  }
  // The cancelled one: its solo ids up to where the Cancel reached it.
  EXPECT_EQ(done[102].reason, cp::StopReason::kCancelled);
  ASSERT_GE(got[102].size(), 3u);
  ASSERT_LT(got[102].size(), solo[102].size());
  EXPECT_EQ(got[102], std::vector<int32_t>(solo[102].begin(), solo[102].begin() + static_cast<long>(got[102].size())));
  // Steps: at most 3 sequences, at least one pass with 3, prefill beside decode rows, and the
  // fourth request in a pass only after another ended.
  ASSERT_FALSE(steps.empty());
  int32_t most = 0;
  bool mixed = false;
  for (const cp::Step& st : steps) {
    EXPECT_LE(st.sequences, 3);
    EXPECT_EQ(st.sequences, static_cast<int32_t>(st.request_ids.size()));
    EXPECT_GE(st.rows, st.sequences);
    EXPECT_GT(st.trunk_bytes, 0);
    EXPECT_GT(st.experts, 0);
    EXPECT_GT(st.expert_bytes, 0);
    most = std::max(most, st.sequences);
    mixed = mixed || (st.prefill_rows > 0 && st.rows > st.prefill_rows);
  }
  EXPECT_EQ(most, 3);
  EXPECT_TRUE(mixed);
  EXPECT_GT(first_fourth, first_done);  // it waited for a free place
  launcher_.Shutdown("compute");
  EXPECT_EQ(compute_.Wait(10s), 0) << launcher_.ReadStderr("compute");
}

INSTANTIATE_TEST_SUITE_P(Budgets, BatchedComputeTest, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& p) { return p.param ? std::string("Resident") : std::string("Streaming"); });

// Prefix reuse (issue 14, docs/pipeline.md "Prefix cache"): with --prefix-cache a new sequence
// whose prompt starts with the ids of a cached snapshot starts from it (Done's cached_tokens:
// the ids not prefilled) and gets exactly the ids and first-token logits of a compute without
// the cache that prefilled everything: the same prompt again, the prompt extended, a seeded
// sampled request, and the next turn of a chat (prompt + answer + new message). A bound smaller
// than one snapshot keeps nothing: cached_tokens 0, the same ids.
TEST_F(ComputeServiceTest, PrefixCacheStartsFromSnapshotsWithTheSameIdsAndLogits) {
  const fs::path dir = fs::path(K3_SVC_SCRATCH) / ("prefix-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string logits = (dir / "first.f32").string();
  struct Out {
    std::vector<int32_t> ids;
    std::string logits;  // float32 logits that chose the first token (--dump-logits)
    int32_t cached = -1;
  };
  constexpr int32_t kGen = 6;
  auto run = [&](uint64_t id, const std::vector<int32_t>& prompt, bool sampled) {
    cp::Generate g;
    g.request_id = id;
    g.ids = prompt;
    g.gen = kGen;
    g.prefill_chunk = 4;  // several chunks: the snapshot mark splits one of them
    if (sampled) {
      g.sampling.temperature = 0.9f;
      g.sampling.seed = 77;
    }
    Send(g);
    Out o;
    auto d = Collect(o.ids);
    EXPECT_TRUE(d) << launcher_.ReadStderr("compute");
    if (!d) return o;
    EXPECT_EQ(d->request_id, id);
    EXPECT_EQ(d->stats.prompt_tokens, static_cast<int32_t>(prompt.size()));
    EXPECT_EQ(d->stats.position, static_cast<int32_t>(prompt.size()) + kGen);
    o.cached = d->stats.cached_tokens;
    std::ifstream f(logits, std::ios::binary);
    o.logits.assign(std::istreambuf_iterator<char>(f), {});
    EXPECT_EQ(o.logits.size(), static_cast<size_t>(cfg_.vocab_size) * 4);
    return o;
  };
  const std::vector<int32_t> P = {1, 5, 9, 200, 77, 3, 18, 42, 64, 2, 150};
  const std::vector<int32_t> Q = {11, 300, 7, 99, 4};
  std::vector<int32_t> PQ = P;
  PQ.insert(PQ.end(), Q.begin(), Q.end());

  // The reference: no cache, every prompt prefilled from nothing.
  RestartCompute({"--dump-logits", logits});
  const Out ref_p = run(1, P, false), ref_pq = run(2, PQ, false), ref_pq_sampled = run(3, PQ, true);
  std::vector<int32_t> turn2 = P;  // a chat's next turn: the answer, then the new message
  turn2.insert(turn2.end(), ref_p.ids.begin(), ref_p.ids.end());
  turn2.insert(turn2.end(), {8, 130, 61});
  const Out ref_turn2 = run(4, turn2, false);
  for (const Out* o : {&ref_p, &ref_pq, &ref_pq_sampled, &ref_turn2}) EXPECT_EQ(o->cached, 0);
  ASSERT_EQ(ref_p.ids.size(), static_cast<size_t>(kGen));

  RestartCompute({"--dump-logits", logits, "--prefix-cache", "64M"});
  auto same = [](const Out& got, const Out& want, int32_t cached, const char* what) {
    EXPECT_EQ(got.cached, cached) << what;
    EXPECT_EQ(got.ids, want.ids) << what;
    EXPECT_TRUE(got.logits == want.logits) << what << ": first-token logits differ";
  };
  same(run(11, P, false), ref_p, 0, "first request");  // nothing cached yet
  // P minus its last id was kept after A's prefill: B feeds Q and P's last id only.
  same(run(12, PQ, false), ref_pq, static_cast<int32_t>(P.size()) - 1, "P + Q");
  same(run(13, P, false), ref_p, static_cast<int32_t>(P.size()) - 1, "P again");
  same(run(14, PQ, true), ref_pq_sampled, static_cast<int32_t>(PQ.size()) - 1, "P + Q sampled");
  // The end of request 11 (P and all its answer but the last id, which was never fed).
  same(run(15, turn2, false), ref_turn2, static_cast<int32_t>(P.size()) + kGen - 1, "next chat turn");
  // keep_state continues the kept sequence as before: not from the cache, nothing cached.
  {
    cp::Generate g;
    g.request_id = 16;
    g.ids = {5, 6};
    g.gen = 2;
    g.keep_state = true;
    Send(g);
    std::vector<int32_t> ids;
    auto d = Collect(ids);
    ASSERT_TRUE(d);
    EXPECT_EQ(d->stats.cached_tokens, 0);
    EXPECT_EQ(d->stats.position, static_cast<int32_t>(turn2.size()) + kGen + 2 + 2);
  }

  // 32 KiB holds no snapshot of this model (its KDA state alone is 56 KiB): nothing is reused.
  RestartCompute({"--dump-logits", logits, "--prefix-cache", "32K"});
  same(run(21, P, false), ref_p, 0, "tiny cache, P");
  same(run(22, PQ, false), ref_pq, 0, "tiny cache, P + Q");
  same(run(23, P, false), ref_p, 0, "tiny cache, P again");
  launcher_.Shutdown("compute");
  EXPECT_EQ(compute_.Wait(10s), 0) << launcher_.ReadStderr("compute");
  fs::remove_all(dir);
}

// The persistent prefix store (docs/pipeline.md "Prefix store"): snapshots one compute process
// wrote start another process's prompts, with exactly the ids and first-token logits of a
// compute without it that prefilled everything, and cached_tokens exactly the stored prefix
// (a restore one position off would change both). Snapshots: the prompt minus its last id, every
// --prefix-store-interval ids (8 here, two chunks of 4) and Generate.snapshot_at. A corrupt
// entry is skipped with one warning and the next shorter one is used.
TEST_F(ComputeServiceTest, PrefixStoreStartsAnotherProcessFromStoredPrefixesWithTheSameIdsAndLogits) {
  const fs::path dir = fs::path(K3_SVC_SCRATCH) / ("store-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string logits = (dir / "first.f32").string(), store = (dir / "store").string();
  struct Out {
    std::vector<int32_t> ids;
    std::string logits;
    int32_t cached = -1;
  };
  auto run = [&](uint64_t id, const std::vector<int32_t>& prompt, int32_t snapshot_at) {
    cp::Generate g;
    g.request_id = id;
    g.ids = prompt;
    g.gen = 5;
    g.prefill_chunk = 4;
    g.snapshot_at = snapshot_at;
    Send(g);
    Out o;
    auto d = Collect(o.ids);
    EXPECT_TRUE(d) << launcher_.ReadStderr("compute");
    if (!d) return o;
    o.cached = d->stats.cached_tokens;
    std::ifstream f(logits, std::ios::binary);
    o.logits.assign(std::istreambuf_iterator<char>(f), {});
    EXPECT_EQ(o.logits.size(), static_cast<size_t>(cfg_.vocab_size) * 4);
    return o;
  };
  const std::vector<int32_t> P = {1, 5, 9, 200, 77, 3, 18, 42, 64, 2, 150};  // 11 ids
  std::vector<int32_t> PQ = P, R(P.begin(), P.begin() + 9), pre = {8, 130, 61, 17, 4, 99}, u1 = pre, u2 = pre;
  PQ.insert(PQ.end(), {11, 300, 7, 99, 4});
  std::vector<int32_t> PS = P;  // P + another ending, asked only after P's entry is corrupt
  PS.insert(PS.end(), {12, 13, 14});
  R.insert(R.end(), {33, 34, 35});      // shares 9 ids with P: the interval snapshot at 8
  u1.insert(u1.end(), {40, 41, 42});    // a chat's preamble, then two different first messages
  u2.insert(u2.end(), {50, 51, 52, 53});

  RestartCompute({"--dump-logits", logits});  // the reference: no store
  const Out ref_p = run(1, P, 0), ref_pq = run(2, PQ, 0), ref_r = run(3, R, 0), ref_u2 = run(4, u2, 0),
            ref_ps = run(5, PS, 0);
  const std::vector<std::string> with_store = {"--dump-logits", logits, "--prefix-store", store,
                                               "--prefix-store-size", "64M", "--prefix-store-interval", "8"};
  RestartCompute(with_store);
  auto same = [](const Out& got, const Out& want, int32_t cached, const char* what) {
    EXPECT_EQ(got.cached, cached) << what;
    EXPECT_EQ(got.ids, want.ids) << what;
    EXPECT_TRUE(got.logits == want.logits) << what << ": first-token logits differ";
  };
  same(run(11, P, 0), ref_p, 0, "first process, P");  // stores P[0..8) and P[0..10)
  run(12, u1, static_cast<int32_t>(pre.size()));     // stores the preamble
  RestartCompute(with_store);  // another process: nothing in memory
  same(run(21, PQ, 0), ref_pq, static_cast<int32_t>(P.size()) - 1, "P + Q from the store");
  same(run(22, R, 0), ref_r, 8, "a prompt sharing 9 ids: the interval snapshot");
  same(run(23, u2, 0), ref_u2, static_cast<int32_t>(pre.size()), "another first message after the preamble");
  EXPECT_NE(launcher_.ReadStderr("compute").find("from the prefix store"), std::string::npos);

  // Corrupt the P[0..10) entry: one warning, then the interval entry (8) is used instead.
  fs::path longest;
  for (const auto& e : fs::directory_iterator(store)) {
    const std::string n = e.path().filename().string();
    if (n.rfind("k3p-", 0) == 0 && n.find("-10-") != std::string::npos) longest = e.path();
  }
  ASSERT_FALSE(longest.empty());
  {
    std::fstream f(longest, std::ios::in | std::ios::out | std::ios::binary);
    const auto at = static_cast<std::streamoff>(fs::file_size(longest) / 2);
    f.seekg(at);
    const char c = static_cast<char>(f.get() ^ 0x20);
    f.seekp(at);
    f.put(c);
  }
  RestartCompute(with_store);
  same(run(31, PS, 0), ref_ps, 8, "P + S with P's longest entry corrupt");
  const std::string err = launcher_.ReadStderr("compute");
  EXPECT_NE(err.find("k3-compute: warning: prefix store"), std::string::npos) << err;
  EXPECT_NE(err.find("checksum mismatch"), std::string::npos) << err;
  launcher_.Shutdown("compute");
  EXPECT_EQ(compute_.Wait(10s), 0) << launcher_.ReadStderr("compute");
  fs::remove_all(dir);
}

// Prefix reuse in the batched scheduler (--max-batch 3): A and B share a prompt prefix and run
// in one batch; C (A's prompt extended) arrives while A and B decode and starts from A's
// prompt-minus-last snapshot, taken from A's own state in the batch; D (A's chat turn: A's
// prompt, A's answer, a new message) arrives once A ended, while B still decodes, and starts
// from A's end-of-request snapshot. Every request gets exactly the ids of a solo fresh run on a
// compute without the cache; cached_tokens say which snapshot each started from.
class BatchedPrefixTest : public ComputeServiceTest {
 protected:
  std::vector<std::string> ComputeFlags() const override { return {"--max-batch", "3"}; }
};

TEST_F(BatchedPrefixTest, SnapshotsFromBatchedSequencesGiveTheSoloIds) {
  const std::vector<int32_t> P = {1, 5, 9, 200, 77, 3, 18, 42, 64};
  auto make = [](uint64_t id, std::vector<int32_t> ids, int32_t gen) {
    cp::Generate g;
    g.request_id = id;
    g.ids = std::move(ids);
    g.gen = gen;
    g.prefill_chunk = 4;  // several chunks: the snapshot mark splits one
    return g;
  };
  std::vector<int32_t> a_ids = P, b_ids = P;
  a_ids.insert(a_ids.end(), {11, 300, 7});  // B shares P only (A minus its last id is not B's prefix)
  b_ids.insert(b_ids.end(), {99, 4, 150});
  cp::Generate A = make(1, a_ids, 8), B = make(2, b_ids, 120);
  B.sampling.temperature = 0.9f;
  B.sampling.seed = 4321;
  std::vector<int32_t> c_ids = a_ids;
  c_ids.insert(c_ids.end(), {2, 61, 130, 8, 17});
  cp::Generate C = make(3, c_ids, 10);
  C.sampling.temperature = 1.1f;
  C.sampling.seed = 77;
  C.sampling.frequency_penalty = 0.5f;

  // Solo fresh runs (no cache: every prompt prefilled from nothing), one at a time.
  auto solo = [&](cp::Generate g) {
    Send(g);
    std::vector<int32_t> ids;
    auto d = Collect(ids);
    EXPECT_TRUE(d) << launcher_.ReadStderr("compute");
    EXPECT_TRUE(d && d->stats.cached_tokens == 0);
    return ids;
  };
  const std::vector<int32_t> ref_a = solo(A), ref_b = solo(B), ref_c = solo(C);
  ASSERT_EQ(ref_a.size(), 8u);
  ASSERT_EQ(ref_b.size(), 120u);
  ASSERT_NE(ref_a[0], c_ids[a_ids.size()]);  // C does not extend A's end snapshot
  std::vector<int32_t> d_ids = a_ids;  // A's next chat turn
  d_ids.insert(d_ids.end(), ref_a.begin(), ref_a.end());
  d_ids.insert(d_ids.end(), {8, 130, 61});
  cp::Generate D = make(4, d_ids, 6);
  D.sampling.temperature = 0.8f;
  D.sampling.seed = 5;
  const std::vector<int32_t> ref_d = solo(D);

  RestartCompute({"--prefix-cache", "64M"});
  steps_.clear();
  Send(A);
  Send(B);
  std::map<uint64_t, std::vector<int32_t>> got;
  std::map<uint64_t, cp::Done> done;
  std::vector<cp::Step> steps;
  bool c_sent = false, d_sent = false;
  while (done.size() < 4) {
    auto m = Next();
    ASSERT_TRUE(m) << launcher_.ReadStderr("compute");
    if (const auto* t = std::get_if<cp::Token>(&*m)) {
      got[t->request_id].push_back(t->id);
      // A's first token: its prefill (and the mark before it) is done; A and B decode.
      if (t->request_id == 1 && !c_sent) {
        Send(C);
        c_sent = true;
      }
    } else if (const auto* st = std::get_if<cp::Step>(&*m)) {
      steps.push_back(*st);
    } else if (const auto* d = std::get_if<cp::Done>(&*m)) {
      done[d->request_id] = *d;
      if (d->request_id == 1 && !d_sent) {
        Send(D);
        d_sent = true;
      }
    }
  }
  EXPECT_EQ(got[1], ref_a);
  EXPECT_EQ(got[2], ref_b);
  EXPECT_EQ(got[3], ref_c);
  EXPECT_EQ(got[4], ref_d);
  EXPECT_EQ(done[1].stats.cached_tokens, 0);
  EXPECT_EQ(done[2].stats.cached_tokens, 0);
  EXPECT_EQ(done[3].stats.cached_tokens, static_cast<int32_t>(a_ids.size()) - 1);  // A's prompt minus its last id
  EXPECT_EQ(done[4].stats.cached_tokens, static_cast<int32_t>(a_ids.size() + ref_a.size()) - 1);  // A's end
  for (uint64_t id : {1u, 2u, 3u, 4u}) {
    const cp::Generate& g = id == 1 ? A : id == 2 ? B : id == 3 ? C : D;
    EXPECT_EQ(done[id].reason, cp::StopReason::kLength) << id;
    EXPECT_EQ(done[id].stats.prompt_tokens, static_cast<int32_t>(g.ids.size())) << id;
    EXPECT_EQ(done[id].stats.position, static_cast<int32_t>(g.ids.size()) + g.gen) << id;
  }
  // A and B shared passes; C and D each prefilled in a pass beside another sequence's decode row.
  auto first_pass_of = [&](uint64_t id) -> const cp::Step* {
    for (const cp::Step& st : steps)
      if (std::count(st.request_ids.begin(), st.request_ids.end(), id)) return &st;
    return nullptr;
  };
  bool ab_together = false;
  for (const cp::Step& st : steps)
    ab_together = ab_together || (std::count(st.request_ids.begin(), st.request_ids.end(), 1u) &&
                                  std::count(st.request_ids.begin(), st.request_ids.end(), 2u));
  EXPECT_TRUE(ab_together);
  for (uint64_t id : {3u, 4u}) {
    const cp::Step* st = first_pass_of(id);
    ASSERT_TRUE(st) << id;
    EXPECT_GE(st->request_ids.size(), 2u) << id;
    EXPECT_GT(st->prefill_rows, 0) << id;
    EXPECT_GT(st->rows, st->prefill_rows) << id;  // another sequence's decode row
  }
  // Only the ids after the snapshots were prefilled: all of A and B, C and D past their cached ids.
  int64_t prefill_rows = 0;
  for (const cp::Step& st : steps) prefill_rows += st.prefill_rows;
  EXPECT_EQ(prefill_rows, static_cast<int64_t>(a_ids.size() + b_ids.size() + c_ids.size() + d_ids.size()) -
                              done[3].stats.cached_tokens - done[4].stats.cached_tokens);
  launcher_.Shutdown("compute");
  EXPECT_EQ(compute_.Wait(10s), 0) << launcher_.ReadStderr("compute");
}

}  // namespace
}  // namespace k3::test
