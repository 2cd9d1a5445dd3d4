// Test tool for the bounded k3-expert-server (test_expert_server_bounds.py): a hostile but
// authenticated client. One mode per run, then a JSON line on stdout with what came back.
//
//   expert_server_flood --endpoint EP [--server-key CERT --client-key NAME_secret] MODE
//     --huge-frames N --frame-mib M   N messages whose one frame is M MiB (libzmq must drop them)
//     --experts N                     one ExpertRequest naming N experts of the first MoE layer
//     --requests N [--connections C]  N one-expert requests as fast as they go, over C sockets
//                                     with the same key, replies read only afterwards
//     --hold H --requests N          first one more connection with the same key asks for H experts,
//                                     one every 0.2 ms, and never reads (tiny receive buffer: once
//                                     the kernel's buffers are full the answers stay queued at the
//                                     server, and the key's in-flight count stays at its limit),
//                                     then N requests as above (--hold-client-key: the holding
//                                     connection uses that key instead; --delay D: the N requests
//                                     go out D seconds after the holding, the holder still connected)
//   --first-moe-layer L, --num-experts E   which experts exist (the model's config)
//   --seconds S                      how long to collect replies (default 5)
//
// Output: {"bytes": answers with expert bytes, "failed": {"<error code>": count}, "details":
// [first failure texts], "sent": messages sent}.
#include <CLI/CLI.hpp>
#include <zmq.hpp>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/ipc/curve.h"
#include "common/ipc/protocol.h"
#include "common/ipc/zmq_channel.h"

namespace {

std::string JsonString(const std::string& s) {
  std::string o = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    if (static_cast<unsigned char>(c) < 0x20) continue;
    o += c;
  }
  return o + "\"";
}

}  // namespace

int main(int argc, char** argv) {
  namespace x = k3::ipc::experts;
  std::string endpoint, server_key, client_key, hold_client_key;
  int hold = 0, huge = 0, frame_mib = 256, experts = 0, requests = 0, connections = 1, first_layer = 0, num_experts = 1;
  double seconds = 5, delay = 0;
  CLI::App app{"expert_server_flood: junk and floods for k3-expert-server"};
  app.add_option("--endpoint", endpoint)->required();
  app.add_option("--server-key", server_key);
  app.add_option("--client-key", client_key);
  app.add_option("--hold", hold);
  app.add_option("--hold-client-key", hold_client_key);
  app.add_option("--huge-frames", huge);
  app.add_option("--frame-mib", frame_mib);
  app.add_option("--experts", experts);
  app.add_option("--requests", requests);
  app.add_option("--connections", connections);
  app.add_option("--first-moe-layer", first_layer);
  app.add_option("--num-experts", num_experts);
  app.add_option("--seconds", seconds);
  app.add_option("--delay", delay);
  CLI11_PARSE(app, argc, argv);

  zmq::context_t ctx;
  std::optional<k3::ipc::CurveClientKeys> keys;
  if (!client_key.empty()) keys = k3::ipc::ReadClientKeys(client_key, server_key);
  std::vector<std::unique_ptr<zmq::socket_t>> socks;
  for (int i = 0; i < connections; ++i) {
    auto s = std::make_unique<zmq::socket_t>(ctx, zmq::socket_type::dealer);
    s->set(zmq::sockopt::linger, 0);
    s->set(zmq::sockopt::sndhwm, 0);  // queue everything: the flood is the point
    if (keys) k3::ipc::ApplyClientKeys(*s, *keys);
    s->connect(endpoint);
    socks.push_back(std::move(s));
  }
  uint64_t sent = 0;
  zmq::socket_t holder(ctx, zmq::socket_type::dealer);
  if (hold > 0) {
    holder.set(zmq::sockopt::linger, 0);
    holder.set(zmq::sockopt::rcvbuf, 4096);
    holder.set(zmq::sockopt::rcvhwm, 1);
    if (!hold_client_key.empty()) {
      k3::ipc::ApplyClientKeys(holder, k3::ipc::ReadClientKeys(hold_client_key, server_key));
    } else if (keys) {
      k3::ipc::ApplyClientKeys(holder, *keys);
    }
    holder.connect(endpoint);
    for (int i = 0; i < hold; ++i) {
      x::ExpertRequest r{static_cast<uint64_t>(1000000 + i), first_layer, {i % num_experts}, x::Priority::kDemand};
      k3::ipc::SendMessage(holder, k3::ipc::Encode(r));
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(500));  // all served or refused first
    std::this_thread::sleep_for(std::chrono::milliseconds(static_cast<int64_t>(delay * 1000)));
  }
  if (huge > 0) {
    for (int i = 0; i < huge; ++i) {
      zmq::message_t big(static_cast<size_t>(frame_mib) << 20);
      std::memset(big.data(), 0x5a, big.size());
      (void)socks[0]->send(big, zmq::send_flags::none);
      ++sent;
    }
  }
  if (experts > 0) {
    x::ExpertRequest r{1, first_layer, {}, x::Priority::kDemand};
    for (int i = 0; i < experts; ++i) r.experts.push_back(i % num_experts);
    k3::ipc::SendMessage(*socks[0], k3::ipc::Encode(r));
    ++sent;
  }
  for (int i = 0; i < requests; ++i) {
    x::ExpertRequest r{static_cast<uint64_t>(100 + i), first_layer, {i % num_experts}, x::Priority::kDemand};
    k3::ipc::SendMessage(*socks[static_cast<size_t>(i % connections)], k3::ipc::Encode(r));
    ++sent;
  }
  uint64_t bytes = 0;
  std::map<int, uint64_t> failed;
  std::vector<std::string> details;
  k3::ipc::RejectCounter rejects;
  const auto end = k3::ipc::Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
  uint64_t expected = huge > 0 ? 0 : (experts > 0 ? 1 : static_cast<uint64_t>(requests));
  while (k3::ipc::Clock::now() < end && (expected == 0 || bytes + [&] {
           uint64_t n = 0;
           for (auto& [code, c] : failed) n += c;
           return n;
         }() < expected)) {
    bool any = false;
    for (auto& s : socks)
      while (auto m = k3::ipc::ReceiveVerified(*s, false, k3::ipc::DecodeExperts, k3::ipc::Clock::now(), rejects)) {
        any = true;
        if (std::get_if<x::ExpertBytes>(&m->message)) {
          ++bytes;
        } else if (const auto* f = std::get_if<x::ExpertFailed>(&m->message)) {
          ++failed[static_cast<int>(f->error)];
          if (details.size() < 3) details.push_back(f->detail);
        }
      }
    if (!any) {
      std::vector<zmq::pollitem_t> items;
      for (auto& s : socks) items.push_back({s->handle(), 0, ZMQ_POLLIN, 0});
      k3::ipc::Poll(items.data(), items.size(), std::chrono::milliseconds(50));
    }
  }
  std::printf("{\"sent\": %llu, \"bytes\": %llu, \"failed\": {", static_cast<unsigned long long>(sent),
              static_cast<unsigned long long>(bytes));
  bool first = true;
  for (auto& [code, c] : failed) {
    std::printf("%s\"%d\": %llu", first ? "" : ", ", code, static_cast<unsigned long long>(c));
    first = false;
  }
  std::printf("}, \"details\": [");
  for (size_t i = 0; i < details.size(); ++i) std::printf("%s%s", i ? ", " : "", JsonString(details[i]).c_str());
  std::printf("]}\n");
  return 0;
}
