#include "speculate.h"

#include <algorithm>
#include <chrono>

#include "common/error.h"

namespace k3::compute {

std::vector<int32_t> DraftNgram(const std::vector<int32_t>& seq, int64_t max_drafts, int64_t max_ngram) {
  std::vector<int32_t> draft;
  const int64_t L = static_cast<int64_t>(seq.size());
  if (max_drafts <= 0) return draft;
  for (int64_t n = std::min(max_ngram, L - 1); n >= 1; --n) {
    const int32_t* suffix = seq.data() + (L - n);
    for (int64_t p = L - n - 1; p >= 0; --p) {  // most recent occurrence first
      if (!std::equal(suffix, suffix + n, seq.data() + p)) continue;
      // Copy what followed, reading on into the draft itself once the source reaches the end
      // (a pattern of period < max_drafts then continues for the whole draft).
      const int64_t lag = L - (p + n);
      for (int64_t t = 0; t < max_drafts; ++t) {
        const int64_t src = p + n + t;
        draft.push_back(src < L ? seq[static_cast<size_t>(src)] : draft[static_cast<size_t>(t - lag)]);
      }
      return draft;
    }
  }
  return draft;
}

Speculator::Speculator(Forward& fwd, int64_t vocab, int64_t max_drafts, TokenChooser choose)
    : fwd_(fwd), V_(vocab), max_drafts_(max_drafts), choose_(std::move(choose)) {}

void Speculator::Step(std::vector<int32_t>& seq, int64_t allowed, const std::vector<int32_t>& stop_ids) {
  if (!queue_.empty()) throw RuntimeFailure("speculate: Step with chosen tokens still queued");
  Settle();
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<int32_t> chunk = DraftNgram(seq, std::min(max_drafts_, allowed - 1));
  for (size_t i = 0; i < chunk.size(); ++i)
    if (std::find(stop_ids.begin(), stop_ids.end(), chunk[i]) != stop_ids.end()) {
      chunk.resize(i + 1);  // a stop id ends generation: nothing after it can be emitted
      break;
    }
  const int64_t n = static_cast<int64_t>(chunk.size());
  chunk.insert(chunk.begin(), seq.back());
  logits_.resize(static_cast<size_t>((n + 1) * V_));
  if (n == 0) {
    fwd_.Run(chunk.data(), 1, false, logits_.data(), nullptr);  // the plain one-token step
  } else {
    fwd_.BeginVerify();
    try {
      fwd_.Run(chunk.data(), n + 1, true, logits_.data(), nullptr);
    } catch (const StopAtSafePoint&) {
      fwd_.KeepFirst(0);
      throw;
    }
    drafted_ += n;
  }
  // Position j's logits follow chunk[0..j]; the draft chunk[j+1] stands when the chooser,
  // given exactly the ids the one-token loop would have, picks it.
  const size_t base = seq.size();
  for (int64_t j = 0; j <= n; ++j) {
    SpecToken t;
    t.logits = logits_.data() + j * V_;
    t.id = choose_(t.logits, seq);
    t.drafted = j < n && t.id == chunk[static_cast<size_t>(j + 1)];
    queue_.push_back(t);
    if (!t.drafted) break;
    seq.push_back(t.id);
  }
  seq.resize(base);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (SpecToken& t : queue_) t.seconds = s / static_cast<double>(queue_.size());
}

SpecToken Speculator::Pop() {
  SpecToken t = queue_.front();
  queue_.pop_front();
  ++popped_;
  if (t.drafted) ++accepted_;
  return t;
}

void Speculator::Settle() {
  // The pass fed chunk[0..n]; emitted so far are chunk[0] (before the pass) and `popped_`
  // chosen tokens, the first popped_ - 1 of which equal chunk[1..popped_). The last emitted
  // token is never fed, so the state keeps chunk[0..popped_).
  if (fwd_.verifying()) fwd_.KeepFirst(popped_);
  popped_ = 0;
}

}  // namespace k3::compute
