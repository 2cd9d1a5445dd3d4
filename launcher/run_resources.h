// What a run owns besides its processes: the shared-memory arenas and the names of its ZeroMQ
// endpoints. Chosen so that nothing of a run can outlive it, however it ends (kill -9 of the
// launcher included; its children die with it through PR_SET_PDEATHSIG):
// - arenas are memfds ("k3-<region>", ShmArena::CreateMemfd), held by the launcher and
//   inherited by the services that use them ("fd:N" on their command lines); the kernel frees
//   them with the last process that holds one;
// - endpoints live in the Linux abstract socket namespace ("ipc://@k3-<pid>-<random>/<name>"),
//   so there is no run directory to leave behind or to be blocked by; binds admit only this
//   user id (ipc::BindPrivate).
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "common/ipc/shm_arena.h"
#include "launcher/run.h"

namespace k3::launch {

class RunResources {
 public:
  // Creates the arenas at `sz` (slot tables formatted) and picks a fresh endpoint name.
  explicit RunResources(const ArenaSizes& sz);

  // "@k3-<pid>-<16 hex digits>": the endpoints are "ipc://" + ipc_name() + "/<name>".
  const std::string& ipc_name() const { return ipc_name_; }
  std::string Endpoint(const std::string& name) const { return "ipc://" + ipc_name_ + "/" + name; }

  ipc::ShmArena pinned, ring, experts;
  std::optional<ipc::ShmArena> embed_window;  // only when the plan streams the embedding

  // The arena descriptors a service with this argv must inherit (those it names as "fd:N").
  std::vector<int> FdsNamedIn(const std::vector<std::string>& argv) const;

 private:
  std::string ipc_name_;
};

}  // namespace k3::launch
