// RingScheduler: which streamed layer goes into which ring slot, and when (pure logic, no I/O,
// no arena). The walk is 0..num_layers-1, then the globals, cyclically; pinned layers and the
// globals never enter the ring. The wanted window is the next `slots` streamed layers in walk
// order starting at `head`; the scheduler fills window layers in order into free slots and, when
// none is free, evicts a ready slot whose layer left the window (after a LayerWant jump).
//
//   Want(L):          head = first streamed layer at or after L (compute waits for L)
//   Done(L, s, gen):  if (s, gen) is the slot's current use: free it, head = layer after L
//   NextFill():       the next (slot, layer) to read, marking the slot Filling
//   Filled(s, gen):   the read landed and was published under `gen`
//
// Thread-safety: none; owned by the service thread.
#pragma once
#include <cstdint>
#include <optional>
#include <vector>

namespace k3::svc {

class RingScheduler {
 public:
  enum class State { kFree, kFilling, kReady };
  struct Slot {
    State state = State::kFree;
    int layer = -1;
    uint64_t generation = 0;  // valid when kReady
  };
  struct Fill {
    uint32_t slot = 0;
    int layer = 0;
  };

  // `pinned`: sorted layer indices that never stream. `slots` >= 1.
  RingScheduler(int num_layers, const std::vector<int>& pinned, uint32_t slots);

  bool streamed(int layer) const;
  int streamed_count() const { return streamed_count_; }
  // Walk position of the next streamed layer at or after `layer` (cyclic); -1 if none streams.
  int NextStreamedFrom(int layer) const;

  void Want(int layer);
  // False (and nothing changes) when (slot, generation) is not the slot's current ready use.
  bool Done(int layer, uint32_t slot, uint64_t generation);
  std::optional<Fill> NextFill();
  void Filled(uint32_t slot, uint64_t generation);
  // A failed read: the slot goes back to free (the layer will be retried on the next Want).
  void Abandon(uint32_t slot);
  // The streamed layers of the window in walk order (at most `slots`).
  std::vector<int> Window() const;
  const std::vector<Slot>& slots() const { return slots_; }
  int head() const { return head_; }

 private:
  int FindSlotOf(int layer) const;
  int num_layers_;
  std::vector<bool> streamed_;
  int streamed_count_ = 0;
  std::vector<Slot> slots_;
  int head_ = -1;  // -1 until the first Want: nothing is read ahead before compute asks
};

}  // namespace k3::svc
