// The flag parser of every k3 binary: CLI11 with the project's conventions, so that every
// main() treats --help, --version and a bad command line alike (docs/exit-codes.md):
//
//     CLI::App app{"k3-x: what it does"};
//     app.add_option(...);
//     if (!k3::ParseCommandLine(app, argc, argv, "k3-x")) return k3::kExitOk;  // inside RunMain
//
// - --version prints "<binary> <version>" (common/version.h) and --help the flags, on stdout;
//   ParseCommandLine then returns false and main() exits 0.
// - Anything else CLI11 refuses (an unknown flag, a value that does not convert or is out of
//   range, a required flag missing, a subcommand missing) throws UsageError with CLI11's reason
//   on one line, so RunMain prints "<binary>: <reason>" and exits 2. CLI11's own report would be
//   two lines without the binary's name.
#pragma once
#include <string>
#include <string_view>

namespace CLI {
class App;
}

namespace k3 {

// True: main() goes on with the parsed flags. False: --help or --version was printed.
bool ParseCommandLine(CLI::App& app, int argc, const char* const* argv, std::string_view binary);

// The one-line reason of a refused command line: CLI11's message with its line breaks (and the
// spaces around them) folded into "; ", then a pointer to --help.
std::string UsageReason(std::string_view cli11_message);

}  // namespace k3
