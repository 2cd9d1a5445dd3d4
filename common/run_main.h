// The one catch block of every main(): a k3::Error becomes "<binary>: <message>" on stderr and
// its exit code, any other exception exit 1 (docs/exit-codes.md); a closed stdout (StdoutClosed)
// is exit 5 without a line. Used by every binary:
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

// Runs `body` (returning the exit code); on an exception prints the one line, calls
// `on_error(code, message)` (e.g. to tell the launcher the service is dead) and returns the code.
template <class Body, class OnError>
int RunMain(std::string_view binary, Body&& body, OnError&& on_error) {
  ExitCode code = kExitRuntime;
  std::string message;
  try {
    return body();
  } catch (const StdoutClosed&) {
    return kExitInterrupted;  // nobody is reading: end quietly
  } catch (const Error& e) {
    code = e.code();
    message = e.what();
  } catch (const std::exception& e) {
    message = e.what();
  }
  PrintError(binary, message);
  on_error(code, message);
  return code;
}

template <class Body>
int RunMain(std::string_view binary, Body&& body) {
  return RunMain(binary, static_cast<Body&&>(body), [](ExitCode, const std::string&) {});
}

}  // namespace k3
