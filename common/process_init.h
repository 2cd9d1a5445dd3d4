// What every k3 binary does first in main(): InitProcess().
//
// - stderr lines are whole: std::cerr / std::clog collect each thread's output up to a newline
//   and hand every complete line (or block of lines) to one write(2); stdio's stderr is line
//   buffered with a 64 KiB buffer. Lines from the processes of one run, which share the
//   launcher's stderr, then never interleave mid-line (a pipe write of up to 4096 bytes is
//   atomic). A partial line is written by an explicit flush (std::flush, fflush) or at exit.
// - SIGUSR1 and SIGUSR2 are harmless: a handler that does nothing (SA_RESTART), so they
//   interrupt the waits that are never restarted (poll, sleeps; k3 retries them on EINTR) but
//   never end the process. (k3-launch starts its services with them ignored, which survives
//   exec, so there is no window before InitProcess either.) SIGCHLD, SIGWINCH, SIGURG and
//   SIGCONT are harmless by default. Stop requests (SIGINT, SIGTERM, SIGHUP) are the
//   services' (service_shell.h InstallStopSignals) and the launcher's own.
#pragma once
#include <cstddef>

namespace k3 {

void InitProcess();

// Writes all of `text` to fd 2 straight away (retrying on EINTR, giving up when stderr is gone):
// a whole line or block of lines in one write, for callers that bypass stdio (the launcher's
// progress line).
void WriteStderr(const char* text, size_t n);

// For command-line work that has no safe point to stop at and nothing to save (k3-tokenizer
// encode / decode / chat): SIGINT, SIGTERM and SIGHUP end the process at once with exit 5, the
// requested-stop code of every binary (docs/exit-codes.md), instead of death by the signal.
void ExitOnStopSignals();

}  // namespace k3
