// The one-shot exchange with compute (one_shot.h): the Generate, its Tokens and Done, the
// Cancel a --stop text causes, the state-file round trips; and the tokenizer's side of it:
// the prompt's encoding and the decoded text through the --stop matcher.
#include <algorithm>
#include <filesystem>

#include "common/error.h"
#include "launcher/runner.h"

namespace k3::launch {

void Runner::HandleCompute(const ipc::Received<ipc::compute::Message>& r) {
  if (chat_active_) {
    chat_inbox_.push_back(r.message);
    return;
  }
  if (const auto* t = std::get_if<ipc::compute::Token>(&r.message)) {
    if (!one_shot_.OnToken(*t, Clock::now())) return;
    // Text leaves out the id that ends the run (an end id or --stop-id) and all after a --stop.
    const bool ends = std::binary_search(stop_ids_.begin(), stop_ids_.end(), t->id);
    if (tok_ && !ends && !stop_text_.matched()) tok_->PushIds({t->id});
    if (!(tok_ && in_.has_text)) Out(std::to_string(t->id) + "\n");  // ids in, ids out
    const size_t n = one_shot_.generated().size();
    if (n >= 2)
      progress_.Show(ProgressText("decoding", static_cast<double>(n - 1),
                                  static_cast<double>(std::max<int64_t>(opt_.gen - 1, 1)), one_shot_.decode_seconds(),
                                  false));
  } else if (const auto* s = std::get_if<ipc::compute::StateDone>(&r.message)) {
    if (s->request_id == kStateOpId) state_done_ = *s;
  } else if (const auto* d = std::get_if<ipc::compute::Done>(&r.message)) {
    // Compute's own counts against what arrived here: a difference means Tokens were lost.
    const std::optional<std::string> warning = one_shot_.OnDone(*d);
    if (warning && !warning->empty()) progress_.Always(*warning);
  }
}

void Runner::SendGenerate(const std::vector<int32_t>& ids) {
  const ipc::compute::Generate g = OneShotGenerate(opt_, ids, stop_ids_);
  one_shot_.Sent(ids.size(), Clock::now());
  SendToCompute(ipc::Encode(g));
}

bool Runner::SendToCompute(const ipc::Encoded& msg) {
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  for (;;) {  // the compute DEALER may not be known to the ROUTER yet (ROUTER_MANDATORY)
    try {
      ipc::SendMessage(*compute_, msg, {}, "compute");
      return true;
    } catch (const Error&) {
      if (Clock::now() > deadline) throw RuntimeFailure("compute never connected to the compute endpoint");
      Pump(Clock::now() + std::chrono::milliseconds(20));
      if (Failed() || StopRequested()) return false;
    }
  }
}

std::optional<ipc::compute::StateDone> Runner::StateRoundTrip(ipc::compute::StateAction action,
                                                              const std::string& path) {
  ipc::compute::StateOp op;
  op.request_id = kStateOpId;
  op.action = action;
  op.path = std::filesystem::absolute(path).string();  // compute's working directory need not be ours
  state_done_.reset();
  if (!SendToCompute(ipc::Encode(op))) return std::nullopt;
  // Loading or writing a file: its size over the disk's speed, plus the checksum.
  while (!state_done_ && !Failed() && !StopRequested()) Pump(Clock::now() + std::chrono::milliseconds(200));
  return state_done_;
}

void Runner::SendCancel() {
  if (cancel_sent_ || one_shot_.done()) return;
  cancel_sent_ = true;
  try {
    ipc::SendMessage(*compute_, ipc::Encode(ipc::compute::Cancel{kGenerateId}), {}, "compute");
  } catch (const Error&) {
    // compute is gone: its death is handled as any other
  }
}

void Runner::PrintText() {
  const std::string t = tok_->TakeNewText();
  if (t.empty()) return;
  const std::string shown = stop_text_.Feed(t);
  if (stop_text_.matched()) SendCancel();
  shown_text_ += shown;
  if (in_.has_text) Out(shown);
}

std::vector<int32_t> Runner::EncodePrompt() {
  tok_->StartEncode(in_.text);
  const auto deadline = Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(opt_.ready_timeout * 1000));
  while (!tok_->encoded() && tok_->failure().empty() && !Failed() && !StopRequested())
    if (!Pump(deadline)) throw RuntimeFailure("the tokenizer did not encode the prompt in time");
  if (!tok_->failure().empty()) throw BadInput("tokenizer: " + tok_->failure());
  if (!tok_->encoded()) return {};  // failed or interrupted: the caller stops
  const std::vector<int32_t> ids = *tok_->encoded();
  if (ids.empty()) throw BadInput("the prompt encodes to no tokens");
  for (int32_t id : ids)
    if (id < 0 || id >= m_.cfg.vocab_size)
      throw BadInput("tokenizer id " + std::to_string(id) + " is outside the model's vocabulary [0," +
                     std::to_string(m_.cfg.vocab_size) + ")");
  progress_.Info("[launch] prompt: " + std::to_string(ids.size()) + " tokens");
  return ids;
}

void Runner::FlushText() {
  tok_->FinishStream();
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  while (!tok_->stream_done() && tok_->failure().empty() && !Failed() && !StopRequested())
    if (!Pump(deadline)) break;
  if (tok_->stream_done()) {
    PrintText();
    const std::string rest = stop_text_.Finish();  // a held-back start of a --stop that never completed
    shown_text_ += rest;
    if (in_.has_text) Out(rest);
  }
  if (!tok_->failure().empty())
    progress_.Always("[launch] warning: generated ids not decoded: " + tok_->failure());
  else if (!tok_->stream_done())
    progress_.Always("[launch] warning: the tokenizer did not finish decoding in time");
}

}  // namespace k3::launch
