// The one catch block of every main(): a k3::Error becomes "<binary>: <message>" on stderr and
// its exit code, any other exception exit 1 (docs/exit-codes.md); a closed stdout (StdoutClosed)
// is exit 5 without a line. The flags are parsed inside it (common/cli_parse.h), so a bad flag
// is such a line too. Used by every binary:
//
//     int main(int argc, char** argv) { return k3::RunMain("k3-launch", [&] { return Main(argc, argv); }); }
#pragma once
#include <cstdio>
#include <exception>
#include <string>
#include <string_view>

#include "common/error.h"

namespace k3 {

// "<binary>: <message>\n" with one write, so lines of processes sharing stderr never interleave.
inline void PrintError(std::string_view binary, std::string_view message) {
  std::string line;
  line.reserve(binary.size() + message.size() + 3);
  line.append(binary).append(": ").append(message).push_back('\n');
  std::fwrite(line.data(), 1, line.size(), stderr);
}

// Runs `body` (returning the exit code); on an exception prints the one line and returns the
// code. (A pipeline service has also told the launcher by then: svc::RunService sends Dead and
// rethrows, common/service/service_shell.h.)
template <class Body>
int RunMain(std::string_view binary, Body&& body) {
  try {
    return body();
  } catch (const StdoutClosed&) {
    return kExitInterrupted;  // nobody is reading: end quietly
  } catch (const Error& e) {
    PrintError(binary, e.what());
    return e.code();
  } catch (const std::exception& e) {
    PrintError(binary, e.what());
    return kExitRuntime;
  }
}

}  // namespace k3
