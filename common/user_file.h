// Files a user names (flags, config keys): read with a type check and a size limit, written
// through a temporary that nothing planted can stand in for.
//
// Reading: a path is opened without blocking (a FIFO with no writer, a terminal) and must be a
// regular file no larger than the reader's limit, so `/dev/zero`, `/dev/urandom` or a FIFO is
// one error line, never an endless read or a hang.
//
// Writing (AtomicFile): the target, when it exists, must be a regular file (a symlink, device,
// FIFO or directory is refused and left alone); the temporary is PATH.tmp-XXXXXX in the
// target's directory, created O_CREAT|O_EXCL|O_NOFOLLOW with a random name (mkostemp), so a
// file or link another user planted is never opened; the result gets the target's permission
// bits when it replaces one, else those of a new file (0666 & ~umask); Commit() flushes, fsyncs
// and renames it into place. An AtomicFile destroyed without Commit() removes its temporary.
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

#include "common/error.h"

namespace k3 {

// Size limits of the small files k3 reads whole (one home for each).
inline constexpr uint64_t kMaxConfigFileBytes = 1ull << 20;   // a TOML config
inline constexpr uint64_t kMaxKeyFileBytes = 64ull << 10;     // a CURVE certificate
inline constexpr uint64_t kMaxPromptFileBytes = 16ull << 20;  // --prompt-file: the tokenizer's message limit
inline constexpr uint64_t kMaxTextFileBytes = 64ull << 20;     // k3-tokenizer's --file, --ids-file
inline constexpr uint64_t kMaxHistoryFileBytes = 64ull << 20;    // a chat history (JSONL)
inline constexpr uint64_t kMaxTokenizerFileBytes = 64ull << 20;  // tiktoken.model, tokenizer_config.json
inline constexpr uint64_t kMaxModelJsonBytes = 256ull << 20;     // config.json, the index, a manifest
inline constexpr uint64_t kMaxSecretFileBytes = 4ull << 10;      // api_key_file: one line (secret_file.h)

// Checks that `path` is a regular file of at most `max_bytes` (opened O_NONBLOCK, so the check
// never blocks) and returns its size. Otherwise throws Error(code, "<what> <path>: <reason>").
uint64_t CheckUserFile(const std::string& path, uint64_t max_bytes, std::string_view what, ExitCode code);

// Which kinds of file a reader takes. kRegularOrPipe: also a pipe or FIFO (`--ids-file
// /dev/stdin`, `<(...)`), read as a stream up to the limit; a FIFO nobody writes to reads as
// empty instead of blocking. Devices, directories and sockets are refused either way.
enum class FileKinds { kRegular, kRegularOrPipe };

// The whole file, after the checks of CheckUserFile (a file or pipe that grows past the limit
// while being read is refused too).
std::string ReadUserFile(const std::string& path, uint64_t max_bytes, std::string_view what, ExitCode code,
                         FileKinds kinds = FileKinds::kRegular);

// Fails early, before any work, when `path` could not be written as an AtomicFile: an existing
// target that is not a regular file, a missing or unwritable directory. Error(kExitOutput,
// "<what> <path>: <reason>").
void CheckOutputPath(const std::string& path, std::string_view what);

class AtomicFile {
 public:
  // Refuses a non-regular target and creates the temporary; errors are
  // Error(code, "<what> <path>: <reason>").
  AtomicFile(std::string path, std::string_view what, ExitCode code);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  std::FILE* stream() { return f_; }
  // Buffered write; false once any write has failed (Commit then throws).
  bool Write(const void* data, size_t n);
  bool Write(std::string_view s) { return Write(s.data(), s.size()); }
  // Flush, fsync, close, give the mode, rename over the target. Throws on any failure (the
  // temporary is removed and the target is untouched).
  void Commit();

 private:
  [[noreturn]] void Fail(const std::string& why);
  std::string path_, what_, tmp_;
  ExitCode code_;
  std::FILE* f_ = nullptr;
  bool ok_ = true;
  unsigned mode_ = 0;
};

// Writes `data` as the whole file `path` through an AtomicFile.
void WriteFileAtomically(const std::string& path, std::string_view data, std::string_view what, ExitCode code);

}  // namespace k3
