#include "services/expert_fetcher/remote_reads.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <variant>

#include "common/ipc/protocol.h"

namespace k3::svc {

namespace x = ipc::experts;

RemoteReads::RemoteReads(zmq::context_t& ctx, const std::string& endpoint, int in_flight,
                         std::chrono::milliseconds resend, std::chrono::milliseconds give_up,
                         const std::optional<ipc::CurveClientKeys>& curve)
    : endpoint_(endpoint),
      sock_(ctx, zmq::socket_type::dealer),
      in_flight_(static_cast<size_t>(std::max(1, in_flight))),
      resend_(resend),
      give_up_(give_up) {
  sock_.set(zmq::sockopt::linger, 0);
  sock_.set(zmq::sockopt::sndtimeo, 2000);  // never hang on a connection closed just now
  if (curve) ipc::ApplyClientKeys(sock_, *curve);
  watch_.emplace(ctx, sock_, endpoint, curve.has_value());
  sock_.connect(endpoint);
}

void RemoteReads::Send(uint64_t id, const Read& r) {
  // A server that refused the handshake leaves no connection to queue on, and a send would
  // block: send only when ZeroMQ can take the request (else it goes again after `resend`).
  zmq::pollitem_t out{sock_.handle(), 0, ZMQ_POLLOUT, 0};
  if (ipc::Poll(&out, 1, std::chrono::milliseconds(0)) <= 0) return;
  ipc::SendMessage(sock_, ipc::Encode(x::ExpertRequest{id, r.layer, {r.expert}, x::Priority::kDemand}));
}

void RemoteReads::Submit(uint64_t tag, int layer, int expert, uint8_t* dst, uint64_t length) {
  waiting_.push_back({tag, layer, expert, dst, length, {}, {}});
  SendWaiting();
}

void RemoteReads::SendWaiting() {
  while (pending_.size() < in_flight_ && !waiting_.empty()) {
    Read r = waiting_.front();
    waiting_.pop_front();
    r.first = r.last = ipc::Clock::now();
    const uint64_t id = next_id_++;
    Send(id, r);
    pending_.emplace(id, r);
  }
}

std::vector<ReadDone> RemoteReads::TakeCompleted() {
  // Error texts leave out the layer and expert: the fetcher's ExpertFailed carries them.
  std::vector<ReadDone> done;
  if (!refused_) refused_ = watch_->Poll();
  if (refused_) {  // nothing will ever come: fail every read now, with the reason
    for (const auto& kv : pending_) done.push_back({kv.second.tag, 0, *refused_});
    for (const Read& r : waiting_) done.push_back({r.tag, 0, *refused_});
    pending_.clear();
    waiting_.clear();
    return done;
  }
  while (auto m = ipc::ReceiveVerified(sock_, false, ipc::DecodeExperts, ipc::Clock::now(), rejects_)) {
    if (const auto* h = std::get_if<x::ExpertBytes>(&m->message)) {
      auto it = pending_.find(h->request_id);
      if (it == pending_.end()) continue;  // answer to a request sent twice: the first one won
      const Read& r = it->second;
      if (h->layer != r.layer || h->expert != r.expert || h->length != r.length ||
          !ipc::ExpertBytesMatch(*h, m->bulk())) {
        done.push_back({r.tag, 0, "expert server " + endpoint_ + " sent " + std::to_string(m->bulk().size()) +
                                      " bytes that fail their length or XXH3 check", true});
      } else {
        std::memcpy(r.dst, m->bulk().data(), m->bulk().size());
        done.push_back({r.tag, r.length, ""});
      }
      pending_.erase(it);
    } else if (const auto* f = std::get_if<x::ExpertFailed>(&m->message)) {
      auto it = pending_.find(f->request_id);
      if (it == pending_.end()) continue;
      done.push_back({it->second.tag, 0, "expert server " + endpoint_ + ": " + f->detail});
      pending_.erase(it);
    } else {
      ++rejects_.rejected;
      rejects_.last_reason = "unexpected message from the expert server";
    }
  }
  const auto now = ipc::Clock::now();
  for (auto it = pending_.begin(); it != pending_.end();) {
    Read& r = it->second;
    if (now - r.first >= give_up_) {
      char secs[32];
      std::snprintf(secs, sizeof secs, "%g", static_cast<double>(give_up_.count()) / 1000);
      done.push_back({r.tag, 0, "expert server " + endpoint_ + " did not answer within " + secs + " s"});
      it = pending_.erase(it);
      continue;
    }
    if (now - r.last >= resend_) {  // lost with a restarted server, or never delivered
      Send(it->first, r);
      r.last = now;
      ++resends_;
    }
    ++it;
  }
  SendWaiting();
  return done;
}

}  // namespace k3::svc
