#include "common/ipc/slot_table.h"

#include <cstring>
#include <string>

#include "common/error.h"

namespace k3::ipc {
namespace {

constexpr char kMagic[8] = {'K', '3', 'S', 'L', 'O', 'T', 'S', '1'};

struct SlotTableHeader {
  char magic[8];
  uint64_t slot_count;
  uint64_t slot_bytes;
  uint64_t stride;
  uint64_t data_offset;
  uint64_t reserved[3];
};
static_assert(sizeof(SlotTableHeader) == 64, "header layout is part of the shm format");

uint64_t RoundUp(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }
uint64_t DataOffset(uint64_t slots) { return RoundUp(sizeof(SlotTableHeader) + 8 * slots, SlotTable::kAlign); }

}  // namespace

size_t SlotTable::BytesNeeded(uint32_t slots, uint64_t slot_bytes) {
  return DataOffset(slots) + static_cast<uint64_t>(slots) * RoundUp(slot_bytes, kAlign);
}

SlotTable::SlotTable(const uint8_t* base, uint8_t* writable_base) : base_(base), wbase_(writable_base) {
  SlotTableHeader h;
  std::memcpy(&h, base, sizeof h);
  count_ = static_cast<uint32_t>(h.slot_count);
  slot_bytes_ = h.slot_bytes;
  stride_ = h.stride;
  data_offset_ = h.data_offset;
}

SlotTable SlotTable::Format(ShmArena& arena, uint32_t slots, uint64_t slot_bytes) {
  if (slots == 0 || slot_bytes == 0) throw RuntimeFailure("shm " + arena.name() + ": slot table needs slots and bytes");
  const size_t need = BytesNeeded(slots, slot_bytes);
  if (arena.size() < need)
    throw RuntimeFailure("shm " + arena.name() + ": " + std::to_string(slots) + " slots of " +
                         std::to_string(slot_bytes) + " bytes need " + std::to_string(need) + " bytes, arena has " +
                         std::to_string(arena.size()));
  uint8_t* base = arena.mutable_data();
  SlotTableHeader h{};
  std::memcpy(h.magic, kMagic, sizeof kMagic);
  h.slot_count = slots;
  h.slot_bytes = slot_bytes;
  h.stride = RoundUp(slot_bytes, kAlign);
  h.data_offset = DataOffset(slots);
  std::memset(base, 0, h.data_offset);
  std::memcpy(base, &h, sizeof h);
  return SlotTable(base, base);
}

SlotTable SlotTable::Attach(const ShmArena& arena) {
  const std::string where = "shm " + arena.name() + ": ";
  if (arena.size() < sizeof(SlotTableHeader)) throw RuntimeFailure(where + "too small for a slot table header");
  SlotTableHeader h;
  std::memcpy(&h, arena.data(), sizeof h);
  if (std::memcmp(h.magic, kMagic, sizeof kMagic) != 0) throw RuntimeFailure(where + "no slot table (bad magic)");
  // Every field is checked against the arena before any slot is touched: the header sits in
  // memory another process wrote.
  const bool shape_ok = h.slot_count > 0 && h.slot_count <= (1u << 24) && h.slot_bytes > 0 &&
                        h.slot_bytes <= arena.size() && h.stride == RoundUp(h.slot_bytes, kAlign) &&
                        h.data_offset == DataOffset(h.slot_count) && h.data_offset <= arena.size();
  // Division, not multiplication, so a hostile header cannot overflow the check.
  if (!shape_ok || h.stride > (arena.size() - h.data_offset) / h.slot_count)
    throw RuntimeFailure(where + "slot table header does not fit the arena");
  return SlotTable(arena.data(), arena.writable() ? const_cast<uint8_t*>(arena.data()) : nullptr);
}

void SlotTable::CheckSlot(uint32_t slot) const {
  if (slot >= count_)
    throw RuntimeFailure("slot " + std::to_string(slot) + " out of range (" + std::to_string(count_) + " slots)");
}

const uint64_t* SlotTable::gens() const {
  return reinterpret_cast<const uint64_t*>(base_ + sizeof(SlotTableHeader));
}

uint64_t SlotTable::slot_offset(uint32_t slot) const {
  CheckSlot(slot);
  return data_offset_ + static_cast<uint64_t>(slot) * stride_;
}

uint8_t* SlotTable::BeginFill(uint32_t slot) {
  CheckSlot(slot);
  if (!wbase_) throw RuntimeFailure("slot table is mapped read-only, cannot fill slot " + std::to_string(slot));
  auto* g = reinterpret_cast<uint64_t*>(wbase_ + sizeof(SlotTableHeader)) + slot;
  uint64_t v = __atomic_load_n(g, __ATOMIC_RELAXED);
  if (v % 2 == 0) __atomic_store_n(g, v + 1, __ATOMIC_SEQ_CST);  // odd: being refilled
  return wbase_ + slot_offset(slot);
}

uint64_t SlotTable::Publish(uint32_t slot) {
  CheckSlot(slot);
  if (!wbase_) throw RuntimeFailure("slot table is mapped read-only, cannot publish slot " + std::to_string(slot));
  auto* g = reinterpret_cast<uint64_t*>(wbase_ + sizeof(SlotTableHeader)) + slot;
  uint64_t v = __atomic_load_n(g, __ATOMIC_RELAXED);
  uint64_t next = v % 2 ? v + 1 : v + 2;  // publishing twice still moves the generation on
  __atomic_store_n(g, next, __ATOMIC_RELEASE);  // the slot's bytes happen-before this store
  return next;
}

void SlotTable::RetireAll() {
  for (uint32_t s = 0; s < count_; ++s) {
    BeginFill(s);
    Publish(s);
  }
}

uint64_t SlotTable::generation(uint32_t slot) const {
  CheckSlot(slot);
  return __atomic_load_n(gens() + slot, __ATOMIC_ACQUIRE);
}

bool SlotTable::IsCurrent(SlotRef ref) const {
  if (ref.slot >= count_ || ref.generation == 0 || ref.generation % 2) return false;
  return generation(ref.slot) == ref.generation;
}

std::span<const uint8_t> SlotTable::Read(SlotRef ref) const {
  if (!IsCurrent(ref)) return {};
  return {base_ + slot_offset(ref.slot), slot_bytes_};
}

}  // namespace k3::ipc
