#include "batch_sequence.h"

#include <algorithm>

namespace k3::compute {

BatchedSequence::BatchedSequence(int64_t vocab, GreedyParams p, GreedyHooks hooks, SequenceState state)
    : V_(vocab), p_(std::move(p)), hooks_(std::move(hooks)), state_(std::move(state)),
      logits_(static_cast<size_t>(vocab)), t0_(Clock::now()) {
  r_.full = p_.ids;
}

Segment BatchedSequence::NextSegment() {
  Segment s;
  s.state = &state_;
  if (prefilling()) {
    const int64_t n = static_cast<int64_t>(p_.ids.size());
    last_T_ = ChunkEnd(fed_, p_.prefill_chunk, n, p_.marks) - fed_;  // ends at a mark inside
    s.ids = p_.ids.data() + fed_;
    s.T = last_T_;
    s.all_positions = p_.all_positions;
    if (p_.all_positions) chunk_logits_.resize(static_cast<size_t>(last_T_ * V_));
    s.logits = p_.all_positions ? chunk_logits_.data() : logits_.data();
  } else {
    last_T_ = 1;
    s.ids = &next_;
    s.T = 1;
    s.logits = logits_.data();
  }
  return s;
}

void BatchedSequence::AfterPass(double seconds) {
  auto since = [](Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); };
  if (!prefilling()) {  // a decode pass
    r_.token_seconds.push_back(seconds);
    t_last_ = Clock::now();
    Emit();
    return;
  }
  const int64_t n = static_cast<int64_t>(p_.ids.size());
  if (p_.all_positions) {
    if (hooks_.on_prompt_chunk) hooks_.on_prompt_chunk(chunk_logits_.data(), last_T_);
    std::copy(chunk_logits_.end() - V_, chunk_logits_.end(), logits_.begin());
  }
  fed_ += last_T_;
  if (fed_ < n && hooks_.at_mark && std::binary_search(p_.marks.begin(), p_.marks.end(), fed_)) hooks_.at_mark(fed_);
  if (hooks_.on_prefill_progress) hooks_.on_prefill_progress(fed_, n);
  if (fed_ < n) {  // between two prompt chunks: a Cancel drops the rest of the prompt
    if (hooks_.cancelled && hooks_.cancelled()) {
      r_.prefill_seconds = since(t0_);
      r_.full.resize(static_cast<size_t>(fed_));
      End(Ending::kCancelled);
    }
    return;
  }
  r_.prefill_seconds = since(t0_);
  r_.prefill_done = true;
  if (hooks_.after_prefill) hooks_.after_prefill(logits_.data());
  gen_ = p_.gen;
  if (p_.max_positions > 0) gen_ = std::min(gen_, std::max<int64_t>(0, p_.max_positions - state_.position));
  seq_ = p_.prior;
  seq_.insert(seq_.end(), r_.full.begin(), r_.full.end());
  before_generation_ = seq_.size();
  t1_ = t_last_ = Clock::now();
  if (gen_ == 0) {
    End(Ending::kLength);
    return;
  }
  Emit();
}

void BatchedSequence::Emit() {
  const int32_t id = p_.choose ? p_.choose(logits_.data(), seq_)  // as RunGreedy chooses
                               : SampleToken(logits_.data(), V_, seq_, static_cast<int64_t>(seq_.size() - before_generation_),
                                             p_.sampling);
  if (hooks_.on_chosen) hooks_.on_chosen(logits_.data(), id, index_);
  r_.generated.push_back(id);
  r_.full.push_back(id);
  seq_.push_back(id);
  if (hooks_.on_token) hooks_.on_token(id, index_);
  if (std::find(p_.stop_ids.begin(), p_.stop_ids.end(), id) != p_.stop_ids.end()) return End(Ending::kStopId);
  if (index_ + 1 == gen_) return End(Ending::kLength);
  if (hooks_.should_stop && hooks_.should_stop()) return End(Ending::kInterrupted);
  if (hooks_.cancelled && hooks_.cancelled()) return End(Ending::kCancelled);
  next_ = id;
  ++index_;
}

void BatchedSequence::Interrupt(bool torn) {
  if (ended_) return;
  if (!r_.prefill_done) r_.prefill_seconds = std::chrono::duration<double>(Clock::now() - t0_).count();
  torn_ = torn;
  End(Ending::kInterrupted);
}

GreedyResult BatchedSequence::Result() const {
  GreedyResult r = r_;
  const auto steps = static_cast<int64_t>(r.token_seconds.size());
  r.decode_seconds = steps > 0 ? std::chrono::duration<double>(t_last_ - t1_).count() : 0.0;
  r.seconds_per_token = steps > 0 ? r.decode_seconds / static_cast<double>(steps) : r.prefill_seconds;
  return r;
}

}  // namespace k3::compute
