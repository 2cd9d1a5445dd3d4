// Writes to stdout where the reader may go away (`k3-launch ... | head`, `k3-tokenizer encode |
// head -c 20`). A closed pipe is a requested stop: exit 5 and no error line (docs/exit-codes.md);
// any other write failure is exit 4 (output).
#pragma once
#include <string_view>

namespace k3 {

// A write to a closed pipe then fails with EPIPE instead of killing the process with SIGPIPE.
// (Children started by k3-launch get SIGPIPE back at its default, launcher/supervisor.cpp.)
void IgnoreSigpipe();

enum class StdoutWrite { kOk, kClosed, kFailed };
// Writes `s` (nothing when empty) and flushes stdout, also what earlier writes (std::cout,
// printf) left in its buffer. kFailed leaves errno set; the error flag of stdout is cleared.
StdoutWrite WriteStdout(std::string_view s);
// WriteStdout that throws StdoutClosed (RunMain: exit 5, quiet) or Error(kExitOutput, "stdout: ...").
void WriteStdoutOrStop(std::string_view s);

}  // namespace k3
