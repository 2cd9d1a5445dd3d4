#include "launcher/run_resources.h"

#include <algorithm>

#include "common/ipc/slot_table.h"
#include "common/ipc/zmq_channel.h"

namespace k3::launch {

RunResources::RunResources(const ArenaSizes& sz)
    : pinned(ipc::ShmArena::CreateMemfd("trunk-pinned", static_cast<size_t>(sz.pinned))),
      ring(ipc::ShmArena::CreateMemfd("trunk-ring", static_cast<size_t>(sz.ring))),
      experts(ipc::ShmArena::CreateMemfd("experts", static_cast<size_t>(sz.experts))),
      ipc_name_(ipc::PrivateEndpointBase().substr(6)) {  // without "ipc://"
  if (sz.embed_window > 0) embed_window.emplace(ipc::ShmArena::CreateMemfd("embed-window", static_cast<size_t>(sz.embed_window)));
  ipc::SlotTable::Format(ring, sz.ring_slots, static_cast<uint64_t>(sz.ring_slot_bytes));
  ipc::SlotTable::Format(experts, sz.expert_slots, static_cast<uint64_t>(sz.expert_slot_bytes));
}

std::vector<int> RunResources::FdsNamedIn(const std::vector<std::string>& argv) const {
  std::vector<int> fds;
  for (const ipc::ShmArena* a : {&pinned, &ring, &experts, embed_window ? &*embed_window : nullptr})
    if (a && std::find(argv.begin(), argv.end(), a->Spec()) != argv.end()) fds.push_back(a->fd());
  return fds;
}

}  // namespace k3::launch
