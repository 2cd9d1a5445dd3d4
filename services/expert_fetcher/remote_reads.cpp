#include "services/expert_fetcher/remote_reads.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <variant>

#include "common/error.h"
#include "common/ipc/protocol.h"

namespace k3::svc {

namespace x = ipc::experts;
using ipc::Clock;

namespace {

std::string SecondsText(std::chrono::milliseconds d) {
  char secs[32];
  std::snprintf(secs, sizeof secs, "%g", static_cast<double>(d.count()) / 1000);
  return secs;
}

}  // namespace

size_t RemoteReads::HomeServer(int layer, int expert, size_t n) {
  // splitmix64's finalizer over (layer << 32 | expert): neighbouring experts land on unrelated
  // servers, and the value never depends on the run.
  uint64_t z = (static_cast<uint64_t>(static_cast<uint32_t>(layer)) << 32) | static_cast<uint32_t>(expert);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return n == 0 ? 0 : static_cast<size_t>(z % n);
}

RemoteReads::RemoteReads(zmq::context_t& ctx, const std::vector<std::string>& endpoints, const RemoteReadsOptions& o)
    : in_flight_(static_cast<size_t>(std::max(1, o.in_flight))),
      resend_(o.resend),
      give_up_(o.give_up),
      drop_after_(o.drop_after) {
  if (endpoints.empty() || endpoints.size() > kMaxServers)
    throw UsageError("--remote: 1 to " + std::to_string(kMaxServers) + " expert servers, not " +
                     std::to_string(endpoints.size()));
  if (o.curve.size() > 1 && o.curve.size() != endpoints.size())
    throw UsageError("--remote-server-key: one for every server or one per --remote, not " +
                     std::to_string(o.curve.size()) + " for " + std::to_string(endpoints.size()));
  servers_.reserve(endpoints.size());  // the watches below hold references into servers_
  for (size_t i = 0; i < endpoints.size(); ++i) {
    const ipc::CurveClientKeys* curve = o.curve.empty() ? nullptr : &o.curve[o.curve.size() == 1 ? 0 : i];
    Server& s = servers_.emplace_back();
    s.st.endpoint = endpoints[i];
    s.sock = Connect(ctx, endpoints[i], curve);
    s.watch = std::make_unique<ipc::HandshakeWatch>(ctx, s.sock, endpoints[i], curve != nullptr);
    ipc::Connect(s.sock, endpoints[i]);
  }
}

zmq::socket_t RemoteReads::Connect(zmq::context_t& ctx, const std::string& endpoint,
                                   const ipc::CurveClientKeys* curve) {
  (void)endpoint;  // connected by the constructor, once the handshake watch is in place
  zmq::socket_t sock(ctx, zmq::socket_type::dealer);
  sock.set(zmq::sockopt::linger, 0);
  sock.set(zmq::sockopt::sndtimeo, 2000);  // never hang on a connection closed just now
  if (curve) ipc::ApplyClientKeys(sock, *curve);
  return sock;
}

ReadDone RemoteReads::Deliver(Server& s, const Read& r, std::span<const uint8_t> bytes) {
  std::memcpy(r.dst, bytes.data(), bytes.size());
  ++s.st.experts;
  s.st.bytes += bytes.size();
  return {r.tag, r.length, "", false, s.st.endpoint};
}

std::vector<zmq::socket_ref> RemoteReads::sockets() {
  std::vector<zmq::socket_ref> out;
  for (Server& s : servers_) out.emplace_back(s.sock);
  return out;
}

size_t RemoteReads::pending() const {
  size_t n = waiting_.size();
  for (const Server& s : servers_) n += s.pending.size();
  return n;
}

uint64_t RemoteReads::resends() const {
  uint64_t n = 0;
  for (const Server& s : servers_) n += s.st.resends;
  return n;
}

std::vector<RemoteServerStats> RemoteReads::stats() const {
  std::vector<RemoteServerStats> out;
  const auto now = Clock::now();
  for (const Server& s : servers_) {
    out.push_back(s.st);
    if (s.busy) out.back().seconds += std::chrono::duration<double>(now - s.busy_since).count();
  }
  return out;
}

size_t RemoteReads::Alive() const {
  return static_cast<size_t>(std::count_if(servers_.begin(), servers_.end(), [](const Server& s) { return !s.st.dropped; }));
}

void RemoteReads::Send(size_t server, uint64_t id, const Read& r) {
  // A server that refused the handshake leaves no connection to queue on, and a send would
  // block: send only when ZeroMQ can take the request (else it goes again after `resend`).
  zmq::pollitem_t out{servers_[server].sock.handle(), 0, ZMQ_POLLOUT, 0};
  if (ipc::Poll(&out, 1, std::chrono::milliseconds(0)) <= 0) return;
  ipc::SendMessage(servers_[server].sock,
                   ipc::Encode(x::ExpertRequest{id, r.layer, {r.expert}, x::Priority::kDemand}));
}

void RemoteReads::Submit(uint64_t tag, int layer, int expert, uint8_t* dst, uint64_t length) {
  waiting_.push_back({tag, layer, expert, dst, length, {}, {}, 0, "", false});
  SendWaiting(failed_);  // reported by the next TakeCompleted
}

void RemoteReads::SendWaiting(std::vector<ReadDone>& done) {
  const size_t n = servers_.size();
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    Read& r = *it;
    // The live untried server with the fewest reads out and room for one more, its home
    // among equals: the queues stay level, so every link is busy while reads wait.
    const size_t home = HomeServer(r.layer, r.expert, n);
    size_t pick = n, untried = 0;
    for (size_t i = 0; i < n; ++i) {
      const Server& s = servers_[i];
      if (s.st.dropped || (r.tried >> i & 1)) continue;
      ++untried;
      if (s.pending.size() >= in_flight_) continue;
      const size_t best = pick == n ? SIZE_MAX : servers_[pick].pending.size();
      if (s.pending.size() < best || (s.pending.size() == best && i == home)) pick = i;
    }
    if (untried == 0) {  // every live server failed this read
      done.push_back({r.tag, 0, r.error, r.corrupt});
      it = waiting_.erase(it);
      continue;
    }
    if (pick == n) {  // its servers are all busy: it waits, later reads may still fit elsewhere
      ++it;
      continue;
    }
    Server& s = servers_[pick];
    const auto now = Clock::now();
    if (s.pending.empty()) s.heard = now;  // waiting for it starts now
    if (!s.busy) {
      s.busy = true;
      s.busy_since = now;
    }
    r.first = r.last = now;
    const uint64_t id = next_id_++;
    Send(pick, id, r);
    s.pending.emplace(id, std::move(r));
    it = waiting_.erase(it);
  }
}

void RemoteReads::Idle(Server& s, Clock::time_point now) {
  if (!s.busy || !s.pending.empty()) return;
  s.busy = false;
  s.st.seconds += std::chrono::duration<double>(now - s.busy_since).count();
}

void RemoteReads::Retry(size_t server, Read r, const std::string& error, bool corrupt) {
  ++servers_[server].st.failures;
  r.tried |= uint64_t{1} << server;
  r.error = error;
  r.corrupt = corrupt;
  waiting_.push_front(std::move(r));
}

void RemoteReads::Drop(size_t server, const std::string& why) {
  Server& s = servers_[server];
  s.st.dropped = true;
  s.st.moved += s.pending.size();
  std::fprintf(stderr, "[expert-fetcher] expert server %s %s with %zu reads out: dropped, its reads go to the "
               "other servers\n", s.st.endpoint.c_str(), why.c_str(), s.pending.size());
  for (auto it = s.pending.rbegin(); it != s.pending.rend(); ++it) waiting_.push_front(std::move(it->second));
  s.pending.clear();
  Idle(s, Clock::now());
  try {
    s.sock.disconnect(s.st.endpoint);  // late answers and reconnects end here
  } catch (const zmq::error_t&) {
  }
}

void RemoteReads::Receive(size_t server, std::vector<ReadDone>& done) {
  Server& s = servers_[server];
  // Error texts leave out the layer and expert: the fetcher's ExpertFailed carries them.
  while (auto m = ipc::ReceiveVerified(s.sock, false, ipc::DecodeExperts, Clock::now(), rejects_)) {
    if (s.st.dropped) continue;  // already in the socket when it was dropped
    s.heard = Clock::now();
    if (const auto* h = std::get_if<x::ExpertBytes>(&m->message)) {
      auto it = s.pending.find(h->request_id);
      if (it == s.pending.end()) continue;  // answer to a request sent twice: the first one won
      Read r = std::move(it->second);
      s.pending.erase(it);
      if (h->layer != r.layer || h->expert != r.expert || h->length != r.length ||
          !ipc::ExpertBytesMatch(*h, m->bulk())) {
        Retry(server, std::move(r), "expert server " + s.st.endpoint + " sent " + std::to_string(m->bulk().size()) +
                                        " bytes that fail their length or XXH3 check", true);
      } else {
        done.push_back(Deliver(s, r, m->bulk()));
      }
    } else if (const auto* f = std::get_if<x::ExpertFailed>(&m->message)) {
      auto it = s.pending.find(f->request_id);
      if (it == s.pending.end()) continue;
      Read r = std::move(it->second);
      s.pending.erase(it);
      Retry(server, std::move(r), "expert server " + s.st.endpoint + ": " + f->detail, false);
    } else {
      ++rejects_.rejected;
      rejects_.last_reason = "unexpected message from the expert server";
    }
    Idle(s, Clock::now());
  }
}

std::string RemoteReads::GiveUpMessage(size_t server) const {
  std::string msg = "expert server " + servers_[server].st.endpoint + " did not answer within " +
                    SecondsText(give_up_) + " s";
  std::string others;
  for (size_t i = 0; i < servers_.size(); ++i)
    if (i != server && servers_[i].st.dropped) others += (others.empty() ? "" : ", ") + servers_[i].st.endpoint;
  if (!others.empty()) msg += "; the other servers (" + others + ") were dropped after " + SecondsText(drop_after_) + " s of silence";
  return msg;
}

std::vector<ReadDone> RemoteReads::TakeCompleted() {
  std::vector<ReadDone> done = std::move(failed_);
  failed_.clear();
  for (size_t i = 0; i < servers_.size(); ++i) {
    Server& s = servers_[i];
    if (s.st.dropped) continue;
    if (!s.refused) s.refused = s.watch->Poll();
    if (!s.refused) continue;
    if (Alive() > 1) {
      Drop(i, "refused this client (" + *s.refused + ")");
    } else {  // nothing will ever come: fail every read now, with the reason
      for (const auto& kv : s.pending) done.push_back({kv.second.tag, 0, *s.refused});
      for (const Read& r : waiting_) done.push_back({r.tag, 0, *s.refused});
      s.pending.clear();
      waiting_.clear();
      Idle(s, Clock::now());
      return done;
    }
  }
  for (size_t i = 0; i < servers_.size(); ++i) Receive(i, done);
  const auto now = Clock::now();
  for (size_t i = 0; i < servers_.size(); ++i) {
    Server& s = servers_[i];
    if (s.st.dropped || s.pending.empty()) continue;
    if (Alive() > 1 && now - s.heard >= drop_after_) {
      Drop(i, "sent nothing for " + SecondsText(drop_after_) + " s");
      continue;
    }
    for (auto it = s.pending.begin(); it != s.pending.end();) {
      Read& r = it->second;
      if (now - r.first >= give_up_) {  // a server that answers others but never this one
        if (Alive() > 1) {
          Retry(i, std::move(r), "expert server " + s.st.endpoint + " did not answer within " + SecondsText(give_up_) + " s",
                false);
        } else {
          done.push_back({r.tag, 0, GiveUpMessage(i)});
        }
        it = s.pending.erase(it);
        continue;
      }
      if (now - r.last >= resend_) {  // lost with a restarted server, or never delivered
        Send(i, it->first, r);
        r.last = now;
        ++s.st.resends;
      }
      ++it;
    }
    Idle(s, now);
  }
  SendWaiting(done);
  return done;
}

}  // namespace k3::svc
