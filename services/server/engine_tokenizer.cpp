// The engine's tokenizer requests (common/ipc/tokenizer_client.h: each answered once, sent
// again after a restart): prompts encoded or chat-rendered, the chat control ids (asked once,
// common/chat_control_ids.h), and each generated id's bytes (asked once, then cached).
#include <cstdio>
#include <iostream>

#include "common/chat_control_ids.h"
#include "common/ipc/protocol.h"
#include "common/ipc/zmq_channel.h"
#include "services/server/engine.h"
#include "services/server/engine_errors.h"

namespace k3::server {
namespace tk = ipc::tokenizer;
using ipc::Clock;

bool Engine::SendTokenizer(TokPending p, const std::function<ipc::Encoded(uint64_t)>& make) {
  const uint64_t id = tok_requests_.Send(make, ipc::TokenizerRequests::Resend::kOnRestartOrTimeout);
  if (id == 0) return false;
  p.sent = Clock::now();
  tok_pending_[id] = std::move(p);
  return true;
}

// A prompt the tokenizer does not answer in time fails (its queue place freed); a stalled
// tokenizer makes /health 503. Idle, a one-id Decode once a second checks it still answers.
void Engine::CheckTokenizerDeadlines() {
  const auto now = Clock::now();
  std::vector<std::pair<uint64_t, uint64_t>> late;  // tokenizer request id, job
  bool stalled = false;
  for (const auto& [tid, p] : tok_pending_) {
    if (now - p.sent <= cfg_.tokenizer_timeout) continue;
    stalled = true;
    if (p.kind == TokKind::kPrompt) late.emplace_back(tid, p.job);
  }
  for (const auto& [tid, job] : late) {
    tok_requests_.Forget(tid);
    tok_pending_.erase(tid);
    char secs[32];
    std::snprintf(secs, sizeof secs, "%g", std::chrono::duration<double>(cfg_.tokenizer_timeout).count());
    Fail(job, MakeHttpError(504, std::string("the tokenizer did not answer within ") + secs + " s", "server_error", "timeout"),
         Outcome::kFailed);
  }
  // Set here, cleared only by a reply (HandleTokenizer): once the late prompt is failed and
  // forgotten nothing may be pending, and the stopped tokenizer must not look healthy until the
  // next probe is late in its turn.
  if (stalled && !tokenizer_stalled_) {
    tokenizer_stalled_ = true;
    UpdateHealth();
  }
  if (tok_pending_.empty() && control_ids_known_ && now - last_probe_ > std::chrono::seconds(1)) {
    last_probe_ = now;
    SendTokenizer(TokPending{TokKind::kDecode, 0, 0, {}}, [](uint64_t tid) { return ipc::Encode(tk::Decode{tid, {0}, false, false}); });
    decoding_.insert(0);
  }
}

// The chat template's control ids, asked once (chat is refused without them).
void Engine::AskControlIds() {
  for (const ControlIdQuery& q : ControlIdQueries())
    SendTokenizer(TokPending{TokKind::kControl, 0, -1, q.text},
                  [&](uint64_t id) { return ipc::Encode(tk::Encode{id, q.text, q.special}); });
}

void Engine::OnControlIds(const std::string& name, const std::vector<int32_t>& ids, const std::string& failure) {
  if (!failure.empty()) {
    std::lock_guard<std::mutex> lock(inbox_mu_);
    if (chat_error_.empty()) chat_error_ = "this model's tokenizer cannot chat: " + name + ": " + failure;
  }
  control_answers_[name] = ids;
  if (control_answers_.size() < ControlIdQueries().size()) return;
  const auto c = ControlIdsFrom(control_answers_, cfg_.vocab);
  {
    std::lock_guard<std::mutex> lock(inbox_mu_);
    if (const auto* p = std::get_if<ControlIdProblem>(&c); p && chat_error_.empty())
      chat_error_ = "this model's tokenizer has no special token " + p->token + ": not a K3 chat vocabulary";
    if (chat_error_.empty()) chat_ids_ = std::get<ChatControlIds>(c);
    control_ids_known_ = true;
  }
  if (!chat_error_.empty()) std::cerr << "[server] /v1/chat/completions is off: " << chat_error_ << "\n";
  UpdateHealth();
}

void Engine::HandleTokenizer() {
  while (auto r = ipc::ReceiveVerified(tok_, false, ipc::DecodeTokenizer, Clock::now(), rejects_)) {
    const uint64_t id = std::visit([](const auto& m) { return m.request_id; }, r->message);
    if (!tok_requests_.Answered(id)) continue;  // answered already (a resend's second reply)
    const auto it = tok_pending_.find(id);
    if (it == tok_pending_.end()) continue;
    TokPending p = std::move(it->second);
    tok_pending_.erase(it);
    if (tokenizer_stalled_) {
      tokenizer_stalled_ = false;  // it answers again
      UpdateHealth();
    }
    const auto* ids = std::get_if<tk::EncodedIds>(&r->message);
    const auto* dec = std::get_if<tk::Decoded>(&r->message);
    const auto* failed = std::get_if<tk::Failed>(&r->message);
    switch (p.kind) {
      case TokKind::kControl:
        OnControlIds(p.name, ids ? ids->ids : std::vector<int32_t>{}, failed ? failed->detail : ids ? "" : "no ids");
        break;
      case TokKind::kPrompt:
        if (ids) OnPromptIds(p.job, ids->ids);
        else if (failed && failed->error == tk::Error::kTooLarge)  // its ids would not fit a message
          Fail(p.job, MakeHttpError(413, "the prompt is too large: " + failed->detail, "invalid_request_error", "prompt_too_large"),
               Outcome::kInvalid);
        else if (active_.count(p.job))
          Fail(p.job,
               MakeHttpError(400,
                             std::string(active_.at(p.job).job->spec.endpoint == Endpoint::kChat
                                             ? "cannot render the conversation: "
                                             : "cannot encode the prompt: ") +
                                 (failed ? failed->detail : "unexpected tokenizer reply"),
                             "invalid_request_error", "invalid_prompt"),
               Outcome::kInvalid);
        break;
      case TokKind::kDecode:
        decoding_.erase(p.id);
        bytes_[p.id] = dec ? dec->text : std::string();  // an id the tokenizer cannot decode shows as nothing
        break;
    }
  }
}

// True when the bytes of `id` are known; else asks for them (once).
bool Engine::HaveBytes(int32_t id) {
  if (bytes_.count(id)) return true;
  if (decoding_.insert(id).second)
    SendTokenizer(TokPending{TokKind::kDecode, 0, id, {}},
                  [&](uint64_t tid) { return ipc::Encode(tk::Decode{tid, {id}, false, false}); });
  return false;
}

}  // namespace k3::server
