#include "scheduler_rules.h"

#include "common/plan/memory_plan.h"
#include "common/sampling_check.h"

namespace k3::compute {

namespace cp = ipc::compute;

std::string RequestProblem(const cp::Generate& g, int64_t vocab, const KeptSequence& kept) {
  for (int32_t id : g.ids)
    if (id < 0 || id >= vocab) return "prompt id " + std::to_string(id) + " outside the vocabulary";
  if (const std::string bad = SamplingProblem(g.sampling, g.logprobs); !bad.empty()) return "Generate: " + bad;
  if (g.spec < 0 || g.spec > plan::kMaxSpecDrafts)
    return "Generate.spec " + std::to_string(g.spec) + " outside [0, " + std::to_string(plan::kMaxSpecDrafts) + "]";
  if (g.keep_state && kept.torn) return "Generate keep_state after a pass that was stopped midway";
  // keep_state feeds the kept ids not consumed yet (the last generated one, say), then the prompt.
  const size_t keeps = KeptIds(g, kept);
  const size_t feed = (g.keep_state ? kept.ids - keeps : 0) + g.ids.size();
  if (feed == 0) return "Generate without prompt ids";
  const size_t sequence = keeps + feed;  // a kept or loaded state included
  if (g.max_positions > 0 && sequence > static_cast<size_t>(g.max_positions))
    return "Generate: a sequence of " + std::to_string(sequence) + " tokens does not fit max_positions " +
           std::to_string(g.max_positions);
  return "";
}

size_t KeptIds(const cp::Generate& g, const KeptSequence& kept) {
  return g.keep_state && !g.full_recompute ? kept.consumed : 0;
}

bool Batchable(const cp::Generate& g, int max_batch) {
  return !g.keep_state && !g.full_recompute && (g.spec == 0 || max_batch > 1);
}

bool JoinsBatch(const cp::Message& next, size_t running, int max_batch, bool interrupted) {
  const auto* g = std::get_if<cp::Generate>(&next);
  return g && Batchable(*g, max_batch) && static_cast<int64_t>(running) < max_batch && !interrupted;
}

std::vector<size_t> PassMembers(const std::vector<bool>& prefilling) {
  std::vector<size_t> members;
  bool prefill_taken = false;
  for (size_t i = 0; i < prefilling.size(); ++i) {
    if (prefilling[i] && prefill_taken) continue;
    prefill_taken = prefill_taken || prefilling[i];
    members.push_back(i);
  }
  return members;
}

bool StartsFromCache(const cp::Generate& g, int64_t capacity) {
  return capacity > 0 && !g.keep_state && !g.full_recompute && !g.perplexity;
}

bool StartsFromStore(const cp::Generate& g, bool store_on) {
  return store_on && g.cache_partition == 0 && StartsFromCache(g, 1);
}

bool OffersStore(const cp::Generate& g, bool store_on) { return store_on && g.cache_partition == 0 && !g.full_recompute; }

bool OffersPrompt(const cp::Generate& g, int64_t capacity, size_t feed) {
  return capacity > 0 && !g.keep_state && !g.full_recompute && feed >= 2;
}

bool OffersEnd(const cp::Generate& g, int64_t capacity, bool torn, bool interrupted) {
  return capacity > 0 && !g.keep_state && !g.full_recompute && !torn && !interrupted;
}

bool StoresEnd(const cp::Generate& g, bool store_on, bool torn, bool interrupted) {
  return OffersStore(g, store_on) && !torn && !interrupted;
}

cp::StopReason WireReason(Ending e) {
  switch (e) {
    case Ending::kStopId: return cp::StopReason::kStopId;
    case Ending::kInterrupted: return cp::StopReason::kInterrupted;
    case Ending::kCancelled: return cp::StopReason::kCancelled;
    case Ending::kLength: break;
  }
  return cp::StopReason::kLength;
}

}  // namespace k3::compute
