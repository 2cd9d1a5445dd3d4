// Shared-memory arenas and slot tables with real processes: fork()ed children map the same
// arena, read-only mappings really are read-only, and cleanup leaves /dev/shm empty.
#include "common/ipc/shm_arena.h"

#include <gtest/gtest.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>

#include "common/error.h"
#include "common/ipc/slot_table.h"

namespace k3::ipc {
namespace {

bool ShmExists(const std::string& name) { return std::filesystem::exists("/dev/shm" + name); }

size_t CountNames(pid_t pid) {
  size_t n = 0;
  const std::string prefix = "k3-" + std::to_string(pid) + "-";
  for (const auto& e : std::filesystem::directory_iterator("/dev/shm"))
    n += e.path().filename().string().rfind(prefix, 0) == 0;
  return n;
}

// Runs fn in a child process; returns its exit status (fn's return value, or 99 on exception).
template <class Fn>
int InChild(Fn fn) {
  pid_t pid = ::fork();
  if (pid == 0) {
    int rc = 99;
    try {
      rc = fn();
    } catch (...) {
    }
    ::_exit(rc);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

TEST(ShmArena, NameFormatAndValidation) {
  EXPECT_EQ(ShmArena::Name(123, "trunk"), "/k3-123-trunk");
  try {
    ShmArena::Name(1, "Bad/Name");
    FAIL() << "bad region accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), kExitUsage);
  }
  EXPECT_THROW(ShmArena::Name(1, ""), Error);
}

TEST(ShmArena, ChildSeesCreatorBytesAndWritesBack) {
  const std::string name = ShmArena::Name(::getpid(), "share");
  {
    ShmArena a = ShmArena::Create(name, 1 << 20, /*populate=*/true);
    for (size_t i = 0; i < a.size(); ++i) a.mutable_data()[i] = static_cast<uint8_t>(i * 13 + 1);
    int rc = InChild([&] {
      ShmArena ro = ShmArena::Open(name, /*writable=*/false);
      if (ro.size() != (1u << 20) || ro.writable()) return 2;
      for (size_t i = 0; i < ro.size(); ++i)
        if (ro.data()[i] != static_cast<uint8_t>(i * 13 + 1)) return 3;
      ShmArena rw = ShmArena::Open(name, /*writable=*/true);
      rw.mutable_data()[12345] = 0xAB;
      return 0;
    });
    EXPECT_EQ(rc, 0);
    EXPECT_EQ(a.data()[12345], 0xAB);  // the child's write landed in the same memory
    EXPECT_TRUE(ShmExists(name));
  }
  EXPECT_FALSE(ShmExists(name)) << "creator did not unlink";
}

TEST(ShmArena, CreateRefusesExistingName) {
  const std::string name = ShmArena::Name(::getpid(), "dup");
  ShmArena a = ShmArena::Create(name, 4096);
  try {
    ShmArena::Create(name, 4096);
    FAIL() << "second create succeeded";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), kExitRuntime);
    EXPECT_NE(std::string(e.what()).find(name), std::string::npos);
  }
  EXPECT_THROW(ShmArena::Open(ShmArena::Name(::getpid(), "missing"), false), Error);
}

TEST(ShmArena, ReadOnlyMappingRefusesWrites) {
  const std::string name = ShmArena::Name(::getpid(), "ro");
  ShmArena a = ShmArena::Create(name, 8192);
  ShmArena ro = ShmArena::Open(name, false);
  EXPECT_THROW(ro.mutable_data(), Error);
  // Bypassing the API must fault: the page is PROT_READ in this process.
  EXPECT_EXIT(
      {
        ::signal(SIGSEGV, SIG_DFL);  // sanitizers install their own handler
        volatile uint8_t* p = const_cast<uint8_t*>(ro.data());
        p[100] = 1;
        ::_exit(0);
      },
      ::testing::KilledBySignal(SIGSEGV), "");
  EXPECT_EQ(a.data()[100], 0);
}

// The launcher's arenas: an anonymous memfd handed to children as "fd:N".
TEST(ShmArena, MemfdArenaIsInheritedByFdNumber) {
  ShmArena a = ShmArena::CreateMemfd("share", 1 << 16);
  ASSERT_GE(a.fd(), 0);
  EXPECT_EQ(a.Spec(), "fd:" + std::to_string(a.fd()));
  EXPECT_TRUE(::fcntl(a.fd(), F_GETFD) & FD_CLOEXEC);  // only chosen children inherit it
  std::memset(a.mutable_data(), 0, a.size());
  a.mutable_data()[10] = 42;
  EXPECT_EQ(InChild([&] {
              // Like a filling service: writable through the inherited fd, which is then closed.
              ShmArena rw = ShmArena::Open(a.Spec(), /*writable=*/true);
              if (rw.size() != (1u << 16) || rw.data()[10] != 42) return 1;
              rw.mutable_data()[11] = 7;
              return ::fcntl(a.fd(), F_GETFD) == -1 ? 0 : 2;
            }),
            0);
  EXPECT_EQ(a.data()[11], 7);
  EXPECT_EQ(InChild([&] {
              // Like compute: reopened read-only, the writable fd closed, mprotect refused.
              ShmArena ro = ShmArena::Open(a.Spec(), /*writable=*/false);
              if (ro.writable() || ro.data()[11] != 7) return 1;
              if (::fcntl(a.fd(), F_GETFD) != -1) return 2;
              void* page = const_cast<uint8_t*>(ro.data());
              return ::mprotect(page, 4096, PROT_READ | PROT_WRITE) != 0 ? 0 : 3;
            }),
            0);
}

TEST(ShmArena, BadFdSpecsAreRefused) {
  EXPECT_THROW(ShmArena::Open("fd:", false), Error);
  EXPECT_THROW(ShmArena::Open("fd:x1", false), Error);
  EXPECT_THROW(ShmArena::Open("fd:999999", false), Error);  // not open
  EXPECT_THROW(ShmArena::CreateMemfd("Bad/Name", 4096), Error);
  // A read-only descriptor cannot become a writable arena.
  ShmArena a = ShmArena::CreateMemfd("rofd", 4096);
  const int ro = ::open(("/proc/self/fd/" + std::to_string(a.fd())).c_str(), O_RDONLY);
  ASSERT_GE(ro, 0);
  EXPECT_THROW(ShmArena::Open("fd:" + std::to_string(ro), true), Error);
}

TEST(ShmArena, CleanupAfterCrashedLauncherLeavesNothing) {
  pid_t child = ::fork();
  if (child == 0) {
    // A "launcher" that creates its arenas and dies without running destructors.
    try {
      for (const char* r : {"trunk", "experts", "state"}) {
        ShmArena a = ShmArena::Create(ShmArena::Name(::getpid(), r), 65536);
        new ShmArena(std::move(a));  // leaked on purpose: simulates a crash
      }
    } catch (...) {
      ::_exit(3);
    }
    ::_exit(0);
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_EQ(CountNames(child), 3u);
  EXPECT_GE(CleanupDeadLaunchers(), 3u);
  EXPECT_EQ(CountNames(child), 0u);
  EXPECT_EQ(CleanupShm(child), 0u);
}

TEST(ShmArena, CleanupByPidLeavesOthers) {
  const pid_t me = ::getpid();
  ShmArena keep = ShmArena::Create(ShmArena::Name(me, "keep"), 4096);
  EXPECT_EQ(CleanupShm(me + 1000000), 0u);  // another launcher: nothing of ours touched
  EXPECT_TRUE(ShmExists(keep.name()));
  EXPECT_EQ(CleanupShm(me), 1u);
  EXPECT_FALSE(ShmExists(keep.name()));
}

TEST(SlotTable, GenerationsDetectReuse) {
  const std::string name = ShmArena::Name(::getpid(), "slots");
  ShmArena a = ShmArena::Create(name, SlotTable::BytesNeeded(3, 10000));
  SlotTable t = SlotTable::Format(a, 3, 10000);
  EXPECT_EQ(t.slot_count(), 3u);
  EXPECT_EQ(t.slot_offset(0) % 4096, 0u);
  EXPECT_EQ(t.slot_offset(1) - t.slot_offset(0), 12288u);  // 10000 rounded up to 4096
  EXPECT_FALSE(t.IsCurrent({0, 0}));                      // never published

  std::memset(t.BeginFill(1), 7, 10000);
  SlotRef ref{1, t.Publish(1)};
  EXPECT_TRUE(t.IsCurrent(ref));
  ASSERT_EQ(t.Read(ref).size(), 10000u);
  EXPECT_EQ(t.Read(ref)[9999], 7);

  std::memset(t.BeginFill(1), 8, 10000);
  EXPECT_FALSE(t.IsCurrent(ref)) << "reference valid while slot is being refilled";
  SlotRef ref2{1, t.Publish(1)};
  EXPECT_FALSE(t.IsCurrent(ref));
  EXPECT_TRUE(t.Read(ref).empty());
  EXPECT_TRUE(t.IsCurrent(ref2));
  EXPECT_NE(ref.generation, ref2.generation);
  EXPECT_FALSE(t.IsCurrent({7, ref2.generation}));  // slot out of range
  EXPECT_THROW(t.BeginFill(3), Error);
}

// A restarted writer retires every slot: no reference from before stays current, and every
// slot reads as published (even) again.
TEST(SlotTable, RetireAllInvalidatesEveryReference) {
  const std::string name = ShmArena::Name(::getpid(), "retire");
  ShmArena a = ShmArena::Create(name, SlotTable::BytesNeeded(3, 4096));
  SlotTable t = SlotTable::Format(a, 3, 4096);
  std::vector<SlotRef> refs;
  for (uint32_t s = 0; s < 3; ++s) {
    t.BeginFill(s);
    refs.push_back({s, t.Publish(s)});
  }
  t.BeginFill(2);  // one slot caught mid-fill, as after a crash
  t.RetireAll();
  for (const SlotRef& r : refs) {
    EXPECT_FALSE(t.IsCurrent(r)) << r.slot;
    EXPECT_EQ(t.generation(r.slot) % 2, 0u) << r.slot;
    EXPECT_TRUE(t.IsCurrent({r.slot, t.generation(r.slot)})) << r.slot;
  }
}

TEST(SlotTable, ReaderProcessSeesPublishedAndStaleSlots) {
  const std::string name = ShmArena::Name(::getpid(), "slots2");
  ShmArena a = ShmArena::Create(name, SlotTable::BytesNeeded(2, 4096));
  SlotTable t = SlotTable::Format(a, 2, 4096);
  std::memset(t.BeginFill(0), 0x5A, 4096);
  const SlotRef first{0, t.Publish(0)};
  int to_child[2], to_parent[2];
  ASSERT_EQ(::pipe(to_child), 0);
  ASSERT_EQ(::pipe(to_parent), 0);
  pid_t pid = ::fork();
  if (pid == 0) {
    int rc = 0;
    try {
      ShmArena ro = ShmArena::Open(name, false);
      SlotTable rt = SlotTable::Attach(ro);
      auto bytes = rt.Read(first);
      if (bytes.size() != 4096 || bytes[0] != 0x5A || bytes[4095] != 0x5A) rc = 2;
      try {
        rt.BeginFill(0);
        rc = 4;  // a read-only reader must not be able to fill
      } catch (const Error&) {
      }
      char c = 0;
      if (::write(to_parent[1], "r", 1) != 1 || ::read(to_child[0], &c, 1) != 1) rc = 5;
      if (rt.IsCurrent(first) || !rt.Read(first).empty()) rc = 3;  // parent refilled slot 0
    } catch (...) {
      rc = 99;
    }
    ::_exit(rc);
  }
  char c = 0;
  ASSERT_EQ(::read(to_parent[0], &c, 1), 1);
  std::memset(t.BeginFill(0), 0x11, 4096);
  t.Publish(0);
  ASSERT_EQ(::write(to_child[1], "g", 1), 1);
  int status = 0;
  ::waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  for (int fd : {to_child[0], to_child[1], to_parent[0], to_parent[1]}) ::close(fd);
}

TEST(SlotTable, AttachRejectsBadHeaders) {
  const std::string name = ShmArena::Name(::getpid(), "badhdr");
  ShmArena a = ShmArena::Create(name, 65536);
  EXPECT_THROW(SlotTable::Attach(a), Error);  // zeros: no magic
  SlotTable::Format(a, 4, 8192);
  EXPECT_NO_THROW(SlotTable::Attach(a));
  uint64_t huge = 1ull << 60;
  std::memcpy(a.mutable_data() + 16, &huge, 8);  // slot_bytes far beyond the arena
  EXPECT_THROW(SlotTable::Attach(a), Error);
  EXPECT_THROW(SlotTable::Format(a, 100, 8192), Error);  // does not fit
}

}  // namespace
}  // namespace k3::ipc
