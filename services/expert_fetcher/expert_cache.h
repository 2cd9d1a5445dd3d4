// ExpertCache: which (layer, expert) lives in which arena slot, LRU order and holds (pure
// logic: no arena, no I/O). A slot is Free, Filling (a read is in flight; never a victim) or
// Ready under a generation. Holds are counted per slot use: every ExpertReady sent adds one,
// every matching ExpertRelease removes one; a held slot is never evicted.
//
// Thread-safety: none; owned by the service thread.
#pragma once
#include <cstdint>
#include <list>
#include <optional>
#include <unordered_map>
#include <vector>

namespace k3::svc {

struct ExpertKey {
  int32_t layer = 0;
  int32_t expert = 0;
  bool operator==(const ExpertKey&) const = default;
  uint64_t packed() const { return (static_cast<uint64_t>(static_cast<uint32_t>(layer)) << 32) | static_cast<uint32_t>(expert); }
};

class ExpertCache {
 public:
  enum class State { kFree, kFilling, kReady };
  struct Slot {
    State state = State::kFree;
    ExpertKey key;
    uint64_t generation = 0;  // valid when kReady
    uint32_t holds = 0;
  };

  explicit ExpertCache(uint32_t slots);

  // Slot holding `key` in any state but Free.
  std::optional<uint32_t> Find(ExpertKey key) const;
  // A victim for a new fill: a free slot first, else the least recently used Ready slot
  // without holds. nullopt when every slot is held or filling.
  std::optional<uint32_t> PickVictim() const;
  // Slot starts holding `key` (the old key, if any, is forgotten).
  void StartFill(uint32_t slot, ExpertKey key);
  void FinishFill(uint32_t slot, uint64_t generation);
  void Abandon(uint32_t slot);  // a failed read: the slot becomes free
  // Marks the slot most recently used.
  void Touch(uint32_t slot);
  void Hold(uint32_t slot);
  // False when (slot, generation) is not a held current use (stale or never handed out).
  bool Release(uint32_t slot, uint64_t generation);

  const Slot& slot(uint32_t s) const { return slots_.at(s); }
  uint32_t size() const { return static_cast<uint32_t>(slots_.size()); }

 private:
  std::vector<Slot> slots_;
  std::unordered_map<uint64_t, uint32_t> where_;  // packed key -> slot
  std::list<uint32_t> lru_;                        // front = least recently used
  std::vector<std::list<uint32_t>::iterator> pos_;
};

}  // namespace k3::svc
