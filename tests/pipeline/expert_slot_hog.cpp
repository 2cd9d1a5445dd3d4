// Test tool for fault 6 (test_compute_faults.py): a second local client of a running expert
// fetcher that takes every expert slot it can get and never releases one. It keeps asking for
// every routed expert it does not hold, so each slot compute lets go of is taken again, until
// the fetcher answers NoSlot for everything compute needs.
//
//   expert_slot_hog --model DIR --endpoint EP [--seconds S]
//
// Prints "holding N slots" (once N stops growing for a while) on stdout, then runs until S
// seconds have passed (default 120) or it is killed.
#include <CLI/CLI.hpp>
#include <zmq.hpp>

#include <chrono>
#include <cstdio>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "common/ipc/protocol.h"
#include "common/ipc/zmq_channel.h"
#include "common/model_config.h"

int main(int argc, char** argv) {
  namespace x = k3::ipc::experts;
  std::string model, endpoint;
  double seconds = 120;
  CLI::App app{"expert_slot_hog: hold every expert slot of a fetcher"};
  app.add_option("--model", model)->required();
  app.add_option("--endpoint", endpoint)->required();
  app.add_option("--seconds", seconds);
  CLI11_PARSE(app, argc, argv);
  const k3::ModelConfig cfg = k3::LoadModelConfig(model + "/config.json");
  zmq::context_t ctx;
  zmq::socket_t sock(ctx, zmq::socket_type::dealer);
  sock.set(zmq::sockopt::linger, 0);
  sock.connect(endpoint);
  k3::ipc::RejectCounter rejects;
  std::set<std::pair<int32_t, int32_t>> held;
  uint64_t next_id = 1;
  size_t reported = 0;
  auto last_growth = k3::ipc::Clock::now();
  const auto end = k3::ipc::Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
  while (k3::ipc::Clock::now() < end) {
    for (int32_t l = static_cast<int32_t>(cfg.first_k_dense_replace); l < cfg.num_layers; ++l) {
      x::ExpertRequest r;
      r.request_id = next_id++;
      r.layer = l;
      for (int32_t e = 0; e < cfg.num_experts; ++e)
        if (!held.count({l, e})) r.experts.push_back(e);
      if (!r.experts.empty()) k3::ipc::SendMessage(sock, k3::ipc::Encode(r));
    }
    const auto round_end = k3::ipc::Clock::now() + std::chrono::milliseconds(20);
    while (auto m = k3::ipc::ReceiveVerified(sock, false, k3::ipc::DecodeExperts, round_end, rejects))
      if (const auto* ready = std::get_if<x::ExpertReady>(&m->message)) {
        if (held.insert({ready->layer, ready->expert}).second) last_growth = k3::ipc::Clock::now();
        // else: a second hold on a slot we already hold; kept as well (never released)
      }
    if (held.size() != reported && k3::ipc::Clock::now() - last_growth > std::chrono::milliseconds(500)) {
      reported = held.size();
      std::printf("holding %zu slots\n", reported);
      std::fflush(stdout);
    }
  }
  return 0;
}
