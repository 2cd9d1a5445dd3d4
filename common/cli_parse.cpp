#include "common/cli_parse.h"

#include <CLI/CLI.hpp>

#include "common/error.h"
#include "common/version.h"

namespace k3 {

std::string UsageReason(std::string_view message) {
  std::string out;
  bool pending_break = false;
  for (const char c : message) {
    if (c == '\n' || c == '\r') {
      pending_break = true;
      continue;
    }
    if (pending_break) {
      while (!out.empty() && out.back() == ' ') out.pop_back();
      if (c == ' ' || c == '\t') continue;  // the indentation of a continued line
      if (!out.empty()) out += "; ";
      pending_break = false;
    }
    out += c;
  }
  while (!out.empty() && out.back() == ' ') out.pop_back();
  if (out.empty()) out = "bad command line";
  return out + " (see --help)";
}

bool ParseCommandLine(CLI::App& app, int argc, const char* const* argv, std::string_view binary) {
  app.name(std::string(binary));  // "Usage: <binary> ..." in --help, not argv[0]'s path
  app.set_version_flag("--version", VersionLine(std::string(binary)));
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {  // --help, --version
    app.exit(e);
    return false;
  } catch (const CLI::ParseError& e) {
    throw UsageError(UsageReason(e.what()));
  }
  return true;
}

}  // namespace k3
