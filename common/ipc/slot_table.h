// Fixed-size slots inside a ShmArena, each with a generation counter kept in the arena
// header so every process sees it. A reference to a slot is (slot, generation); when the
// owner refills the slot the generation moves on, so a stale reference is detected instead
// of silently reading another layer's or expert's bytes.
//
// Arena layout (all little-endian, documented in docs/memory-plan.md):
//   [0, 64)            SlotTableHeader {magic "K3SLOTS1", slot_count, slot_bytes, stride, data_offset}
//   [64, 64+8*n)       uint64 generation per slot (even = published, odd = being refilled)
//   [data_offset, ...) slot i at data_offset + i*stride (stride = slot_bytes rounded up to 4096,
//                      so every slot is O_DIRECT-aligned)
//
// Protocol: the single writer calls BeginFill (generation becomes odd: every outstanding
// reference is now stale), writes the bytes, then Publish (generation becomes even, with a
// release fence) and announces (slot, generation). A reader checks IsCurrent(ref) before
// using the bytes and again after; Read() returns an empty span for a stale reference.
// Thread/process safety: one writer per slot; any number of readers.
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>

#include "common/ipc/shm_arena.h"
#include "common/read_window.h"

namespace k3::ipc {

struct SlotRef {
  uint32_t slot = 0;
  uint64_t generation = 0;
};

class SlotTable {
 public:
  static constexpr uint64_t kAlign = kReadAlign;  // a slot is an O_DIRECT destination
  // Arena bytes needed for `slots` slots of `slot_bytes` each.
  static size_t BytesNeeded(uint32_t slots, uint64_t slot_bytes);
  // Writer: writes a fresh header (all generations 0) into a writable arena.
  // Throws k3::Error(kExitRuntime) if the arena is too small or read-only.
  static SlotTable Format(ShmArena& arena, uint32_t slots, uint64_t slot_bytes);
  // Any process: validates the header against the arena size; k3::Error(kExitRuntime) if bad.
  static SlotTable Attach(const ShmArena& arena);

  uint32_t slot_count() const { return count_; }
  uint64_t slot_bytes() const { return slot_bytes_; }
  uint64_t slot_offset(uint32_t slot) const;  // byte offset of the slot inside the arena

  // Writer side. BeginFill invalidates the slot's references and returns its bytes.
  uint8_t* BeginFill(uint32_t slot);
  // Makes the slot's bytes visible under a new generation, which it returns.
  uint64_t Publish(uint32_t slot);
  // Moves every slot's generation on, so no reference taken before stays current: what a
  // (re)started writer does first, since a reader may still hold references from before a crash.
  void RetireAll();

  // Reader side.
  uint64_t generation(uint32_t slot) const;
  bool IsCurrent(SlotRef ref) const;
  // The slot's bytes if `ref` is current, else an empty span.
  std::span<const uint8_t> Read(SlotRef ref) const;

 private:
  SlotTable(const uint8_t* base, uint8_t* writable_base);
  void CheckSlot(uint32_t slot) const;
  const uint64_t* gens() const;
  const uint8_t* base_ = nullptr;
  uint8_t* wbase_ = nullptr;  // null on read-only mappings
  uint32_t count_ = 0;
  uint64_t slot_bytes_ = 0;
  uint64_t stride_ = 0;
  uint64_t data_offset_ = 0;
};

}  // namespace k3::ipc
