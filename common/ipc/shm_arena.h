// Shared-memory arenas: the only way bulk bytes (trunk layers, experts) move between k3
// processes. The launcher creates each arena as an anonymous memfd ("k3-<region>", no name in
// any file system) and hands its descriptor to the services it spawns ("fd:N" on their command
// line); the memory goes away with the last process that holds the descriptor or a mapping, so
// nothing of a run outlives it, whatever way it ends (kill -9 included). The filling service
// maps it read-write and consumers map it read-only (PROT_READ: a stray write is a SIGSEGV,
// not silent corruption).
//
// Named POSIX arenas ("/k3-<pid>-<region>" in /dev/shm) remain for tests that play the
// launcher; their names are unlinked by the creator when it goes away, and CleanupShm() /
// CleanupDeadLaunchers() remove names a crashed creator (or a k3 from before memfd arenas) left.
//
// Ownership: ShmArena owns one mapping (unmapped in the destructor) and, when it created
// the name, the name too. Move-only. Not thread-safe to move; the mapped bytes themselves
// are shared memory and follow whatever protocol the users agree on (see SlotTable).
#pragma once
#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace k3::ipc {

class ShmArena {
 public:
  // "/k3-<pid>-<region>". region: [a-z0-9_-]{1,64}, else k3::Error(kExitUsage).
  static std::string Name(pid_t launcher_pid, std::string_view region);

  // Creates a new name (fails if it exists), sizes it to `bytes` and maps it read-write.
  // The arena unlinks the name in its destructor unless Release()d.
  static ShmArena Create(const std::string& name, size_t bytes, bool populate = false);
  // Creates an anonymous memfd arena ("k3-<region>" in /proc/PID/fd links), sized and mapped
  // read-write. The arena keeps the descriptor open (close-on-exec) for passing to children:
  // Spec() is what they give Open(). region as in Name().
  static ShmArena CreateMemfd(std::string_view region, size_t bytes);
  // Maps an existing arena: "fd:N" (an inherited memfd) or a "/k3-..." name. `writable`=false
  // maps PROT_READ only: the fd is opened O_RDONLY (an inherited fd is reopened read-only
  // through /proc/self/fd and the writable one closed), so the mapping can never be made
  // writable by this process. An inherited fd is closed once mapped either way.
  static ShmArena Open(const std::string& name, bool writable, bool populate = false);

  ShmArena() = default;
  ~ShmArena();
  ShmArena(ShmArena&& o) noexcept;
  ShmArena& operator=(ShmArena&& o) noexcept;
  ShmArena(const ShmArena&) = delete;
  ShmArena& operator=(const ShmArena&) = delete;

  const std::string& name() const { return name_; }
  int fd() const { return fd_; }  // CreateMemfd arenas only, else -1
  std::string Spec() const;       // "fd:N" for a memfd arena, else the name
  size_t size() const { return size_; }
  bool writable() const { return writable_; }
  bool owns_name() const { return owns_name_; }
  const uint8_t* data() const { return data_; }
  // Throws k3::Error(kExitRuntime) on a read-only mapping.
  uint8_t* mutable_data();

  // Creator only: remove the name now (existing mappings stay valid). Idempotent.
  void Unlink();

 private:
  void Reset();
  std::string name_;
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
  bool writable_ = false;
  bool owns_name_ = false;
  int fd_ = -1;
};

// Unlinks every "/k3-<pid>-*" name in /dev/shm; returns how many were removed.
size_t CleanupShm(pid_t launcher_pid);
// Unlinks the arenas of every launcher pid that no longer exists; returns how many.
size_t CleanupDeadLaunchers();

}  // namespace k3::ipc
