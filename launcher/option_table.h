// k3-launch's option table: every option once, with its TOML key (the flag is the key with
// dashes: a_b is --a-b), type, help text and the services whose command lines carry it. The
// TOML reader, the flag registration, the flags-over-TOML merge, `--help` and docs/formats.md's
// table (OptionTableMarkdown; tests compare the two) are all driven by it. Ranges and the rules
// between options are CheckOptions (options.cpp).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "options.h"

namespace k3::launch {

enum class OptionType {
  kString,
  kPath,       // a string; in the TOML relative to the TOML's directory
  kOutput,     // a path written to: relative to the working directory, also in the TOML
  kSize,       // a string ("64M", "auto", ...) or, in the TOML, an integer number of bytes
  kInt,
  kNumber,
  kBool,       // a flag; a default-true key also has the negation --no-a-b
  kStrings,    // TOML: a string or a list of them; the flag repeats
  kPaths,      // kStrings of input paths
  kTexts,      // TOML: a list of non-empty strings; the flag repeats
  kIds,        // TOML: a list of token ids; the flag a comma-separated list
  kSeed,       // an integer from 0 to 2^64-1
};

// The services whose command lines carry an option (command_lines.cpp), a bit mask.
enum ServiceBit : unsigned {
  kToTrunkReader = 1,
  kToExpertFetcher = 2,
  kToCompute = 4,
  kToTokenizer = 8,
  kToServer = 16,
};

using FieldRef = std::variant<std::string*, int64_t*, int*, double*, float*, bool*, uint64_t*,
                              std::vector<std::string>*, std::vector<int32_t>*>;

struct OptionSpec {
  std::string key;  // TOML key; FlagOfKey(key) is the flag
  OptionType type;
  std::function<FieldRef(LaunchOptions&)> field;
  std::string value;  // the flag's value name in --help and the docs ("N", "DIR"; "" for a kBool)
  std::string help;
  unsigned services = 0;
  std::string default_text;  // the default in words when the value alone does not say it
  // The special cases that are real:
  std::string group;       // an exclusive group: one flag of it replaces every key of the group
  std::string one_flag;    // kIds: a repeatable flag adding one id (--stop-id); both add up
  std::function<bool*(LaunchOptions&)> given;  // set when the TOML or a flag gives the key
};

// In docs/formats.md's order.
const std::vector<OptionSpec>& LaunchOptionTable();
const OptionSpec* FindLaunchOption(std::string_view key);
std::string FlagOf(const OptionSpec& s);
// "--prefetch-hints" for a default-true kBool: also "--no-prefetch-hints"; else empty.
std::string NegationOf(const OptionSpec& s);
// The default of a default-constructed LaunchOptions, in words ("16", "pread", "none", "on").
std::string DefaultText(const OptionSpec& s);
std::string TypeText(OptionType t);
std::string ServicesText(unsigned services);
// The option's value as text (tests compare a flag's effect with its key's).
std::string ValueText(const OptionSpec& s, LaunchOptions& o);
// docs/formats.md's table: the header, then one row per option.
std::string OptionTableMarkdown();

}  // namespace k3::launch
