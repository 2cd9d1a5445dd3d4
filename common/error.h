// One error type for the whole engine: a one-line message plus the process exit code it maps to.
// Thrown by readers and validators; caught once in each main() (k3::RunMain, common/run_main.h),
// which prints "<binary>: <message>".
#pragma once
#include <stdexcept>
#include <string>

namespace k3 {

// Documented in docs/exit-codes.md; every binary uses the same table.
enum ExitCode : int {
  kExitOk = 0,
  kExitRuntime = 1,      // I/O failure, allocation failure, dead peer, internal error
  kExitUsage = 2,        // bad command line flag or value
  kExitBadModel = 3,     // checkpoint or config.json corrupt, truncated or unsupported
  kExitOutput = 4,       // run finished but an output file (--out, --dump-*) could not be written
  kExitInterrupted = 5,  // stopped by Ctrl-C / SIGTERM at a safe point
  kExitBudget = 6,       // memory budget below the floor
  kExitBadInput = 7,     // malformed input data other than the model (ids, prompt, tokenizer files)
};

class Error : public std::runtime_error {
 public:
  Error(ExitCode code, const std::string& msg) : std::runtime_error(msg), code_(code) {}
  ExitCode code() const { return code_; }

 private:
  ExitCode code_;
};

// stdout's reader went away (`| head`): a requested stop. RunMain exits 5 without a line.
class StdoutClosed : public Error {
 public:
  StdoutClosed() : Error(kExitInterrupted, "stdout closed") {}
};

// Factories so call sites read as what went wrong.
inline Error BadModel(const std::string& m) { return Error(kExitBadModel, m); }
inline Error UsageError(const std::string& m) { return Error(kExitUsage, m); }
inline Error RuntimeFailure(const std::string& m) { return Error(kExitRuntime, m); }
inline Error BadInput(const std::string& m) { return Error(kExitBadInput, m); }

}  // namespace k3
