#include "services/trunk_reader/ring_scheduler.h"

#include <algorithm>

namespace k3::svc {

RingScheduler::RingScheduler(int num_layers, const std::vector<int>& pinned, uint32_t slots)
    : num_layers_(num_layers), streamed_(static_cast<size_t>(num_layers), true), slots_(slots) {
  for (int l : pinned)
    if (l >= 0 && l < num_layers) streamed_[static_cast<size_t>(l)] = false;
  streamed_count_ = static_cast<int>(std::count(streamed_.begin(), streamed_.end(), true));
}

bool RingScheduler::streamed(int layer) const {
  return layer >= 0 && layer < num_layers_ && streamed_[static_cast<size_t>(layer)];
}

int RingScheduler::NextStreamedFrom(int layer) const {
  if (streamed_count_ == 0) return -1;
  // Walk positions are 0..num_layers (num_layers = globals, never streamed).
  int l = std::clamp(layer, 0, num_layers_);
  for (int i = 0; i <= num_layers_; ++i) {
    const int p = (l + i) % (num_layers_ + 1);
    if (streamed(p)) return p;
  }
  return -1;
}

void RingScheduler::Want(int layer) { head_ = NextStreamedFrom(layer); }

std::vector<int> RingScheduler::Window() const {
  std::vector<int> w;
  if (head_ < 0) return w;
  const int n = std::min<int>(static_cast<int>(slots_.size()), streamed_count_);
  int l = head_;
  for (int i = 0; i < n; ++i) {
    w.push_back(l);
    l = NextStreamedFrom(l + 1);
  }
  return w;
}

int RingScheduler::FindSlotOf(int layer) const {
  for (size_t s = 0; s < slots_.size(); ++s)
    if (slots_[s].state != State::kFree && slots_[s].layer == layer) return static_cast<int>(s);
  return -1;
}

bool RingScheduler::Done(int layer, uint32_t slot, uint64_t generation) {
  if (slot >= slots_.size()) return false;
  Slot& s = slots_[slot];
  if (s.state != State::kReady || s.layer != layer || s.generation != generation) return false;
  s = Slot{};
  head_ = NextStreamedFrom(layer + 1);
  return true;
}

std::optional<RingScheduler::Fill> RingScheduler::NextFill() {
  const std::vector<int> window = Window();
  for (int layer : window) {
    if (FindSlotOf(layer) >= 0) continue;
    int victim = -1;
    for (size_t s = 0; s < slots_.size() && victim < 0; ++s)
      if (slots_[s].state == State::kFree) victim = static_cast<int>(s);
    // No free slot: take a ready slot whose layer left the window (compute jumped with Want).
    for (size_t s = 0; s < slots_.size() && victim < 0; ++s)
      if (slots_[s].state == State::kReady &&
          std::find(window.begin(), window.end(), slots_[s].layer) == window.end())
        victim = static_cast<int>(s);
    if (victim < 0) return std::nullopt;  // wait for a LayerDone or a landing read
    slots_[static_cast<size_t>(victim)] = Slot{State::kFilling, layer, 0};
    return Fill{static_cast<uint32_t>(victim), layer};
  }
  return std::nullopt;
}

void RingScheduler::Filled(uint32_t slot, uint64_t generation) {
  Slot& s = slots_.at(slot);
  s.state = State::kReady;
  s.generation = generation;
}

void RingScheduler::Abandon(uint32_t slot) { slots_.at(slot) = Slot{}; }

}  // namespace k3::svc
