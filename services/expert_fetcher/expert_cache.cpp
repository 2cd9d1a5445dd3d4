#include "services/expert_fetcher/expert_cache.h"

namespace k3::svc {

ExpertCache::ExpertCache(uint32_t slots) : slots_(slots), pos_(slots) {
  for (uint32_t s = 0; s < slots; ++s) pos_[s] = lru_.insert(lru_.end(), s);
}

std::optional<uint32_t> ExpertCache::Find(ExpertKey key) const {
  auto it = where_.find(key.packed());
  if (it == where_.end()) return std::nullopt;
  return it->second;
}

std::optional<uint32_t> ExpertCache::PickVictim() const {
  for (uint32_t s = 0; s < slots_.size(); ++s)
    if (slots_[s].state == State::kFree) return s;
  for (uint32_t s : lru_)
    if (slots_[s].state == State::kReady && slots_[s].holds == 0) return s;
  return std::nullopt;
}

void ExpertCache::StartFill(uint32_t slot, ExpertKey key) {
  Slot& s = slots_.at(slot);
  if (s.state != State::kFree) where_.erase(s.key.packed());
  s = Slot{State::kFilling, key, 0, 0};
  where_[key.packed()] = slot;
  Touch(slot);
}

void ExpertCache::FinishFill(uint32_t slot, uint64_t generation) {
  Slot& s = slots_.at(slot);
  s.state = State::kReady;
  s.generation = generation;
}

void ExpertCache::Abandon(uint32_t slot) {
  Slot& s = slots_.at(slot);
  if (s.state != State::kFree) where_.erase(s.key.packed());
  s = Slot{};
}

void ExpertCache::Touch(uint32_t slot) { lru_.splice(lru_.end(), lru_, pos_.at(slot)); }

void ExpertCache::Hold(uint32_t slot) { ++slots_.at(slot).holds; }

bool ExpertCache::Release(uint32_t slot, uint64_t generation) {
  if (slot >= slots_.size()) return false;
  Slot& s = slots_[slot];
  if (s.state != State::kReady || s.generation != generation || s.holds == 0) return false;
  --s.holds;
  return true;
}

}  // namespace k3::svc
