// k3-launch's option table (launcher/option_table.h): every TOML key a_b is the flag --a-b and
// sets the same field; --help shows every flag with its default; docs/formats.md's TOML table is
// the table.
#include "launcher/option_table.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>

#include "common/error.h"

namespace k3::launch {
namespace {

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The first markdown table under docs/formats.md's "## Launcher configuration (TOML)".
std::string DocsTomlTable() {
  const std::string doc = ReadFile(std::string(K3_SOURCE_DIR) + "/docs/formats.md");
  const size_t section = doc.find("\n## Launcher configuration (TOML)\n");
  if (section == std::string::npos) return "<no section>";
  std::istringstream lines(doc.substr(section + 1));
  std::string line, table;
  bool in_table = false;
  while (std::getline(lines, line)) {
    if (line.rfind("## ", 0) == 0 && !table.empty()) break;
    if (line.rfind("|", 0) == 0) {
      in_table = true;
      table += line + "\n";
    } else if (in_table) {
      break;
    }
  }
  return table;
}

// The backticked key of each row after the header and separator rows.
std::vector<std::string> KeysOf(const std::string& table) {
  std::vector<std::string> keys;
  std::istringstream lines(table);
  std::string line;
  for (int row = 0; std::getline(lines, line); ++row) {
    if (row < 2) continue;
    const size_t a = line.find('`'), b = line.find('`', a + 1), bar = line.find('|', 1);
    keys.push_back(a < bar && b < bar ? line.substr(a + 1, b - a - 1) : line.substr(1, bar - 1));
  }
  return keys;
}

TEST(OptionTable, DocsFormatsTableIsTheTable) {
  const std::string docs = DocsTomlTable();
  std::vector<std::string> table_keys;
  for (const OptionSpec& s : LaunchOptionTable()) table_keys.push_back(s.key);
  const std::vector<std::string> doc_keys = KeysOf(docs);
  std::set<std::string> seen;
  for (const std::string& k : doc_keys) EXPECT_TRUE(seen.insert(k).second) << "docs/formats.md lists '" << k << "' twice";
  for (const std::string& k : table_keys)
    EXPECT_TRUE(seen.count(k)) << "docs/formats.md's TOML table lacks '" << k << "'";
  for (const std::string& k : doc_keys)
    EXPECT_NE(FindLaunchOption(k), nullptr) << "docs/formats.md lists '" << k << "', which k3-launch does not read";
  // Row for row (the order, flags, types, defaults, services and texts): paste
  // OptionTableMarkdown()'s output into docs/formats.md after changing the table.
  EXPECT_EQ(docs, OptionTableMarkdown()) << "the table for docs/formats.md:\n" << OptionTableMarkdown() << "(end)";
}

TEST(OptionTable, KeysAndFlagsAreOneName) {
  std::set<std::string> keys;
  for (const OptionSpec& s : LaunchOptionTable()) {
    EXPECT_TRUE(keys.insert(s.key).second) << s.key << " twice";
    EXPECT_EQ(s.key.find('-'), std::string::npos) << s.key;
    std::string flag = s.key;
    std::replace(flag.begin(), flag.end(), '_', '-');
    EXPECT_EQ(FlagOf(s), "--" + flag);
    EXPECT_FALSE(s.help.empty()) << s.key;
    EXPECT_EQ(s.value.empty(), s.type == OptionType::kBool) << s.key << ": a value name exactly when it takes one";
  }
}

// What k3-launch --help prints, through the parser k3-launch runs.
std::string Help() {
  std::string a0 = "k3-launch", a1 = "--help";
  char* argv[] = {a0.data(), a1.data()};
  testing::internal::CaptureStdout();
  const std::optional<LaunchOptions> o = ParseLaunchOptions(2, argv);
  EXPECT_FALSE(o.has_value());
  return testing::internal::GetCapturedStdout();
}

// Every flag of --help is a TOML key (or a key's negation or one-id form), every key a flag in
// --help, each with its default.
TEST(OptionTable, HelpShowsEveryFlagOfAKeyWithItsDefault) {
  const std::string help = Help();
  std::set<std::string> allowed = {"-h", "--help", "--version"};
  for (const OptionSpec& s : LaunchOptionTable()) {
    allowed.insert(FlagOf(s));
    if (!NegationOf(s).empty()) allowed.insert(NegationOf(s));
    if (!s.one_flag.empty()) allowed.insert(s.one_flag);
  }
  std::istringstream lines(help);
  std::string line;
  std::set<std::string> shown;
  while (std::getline(lines, line)) {
    const size_t start = line.find_first_not_of(' ');
    if (start == std::string::npos || line[start] != '-') continue;
    std::string names = line.substr(start, line.find(' ', start) - start);
    names = names.substr(0, names.find('{'));  // --a,--no-a{false}
    for (size_t a = 0, b; a < names.size(); a = b + 1) {
      b = names.find(',', a);
      if (b == std::string::npos) b = names.size();
      const std::string flag = names.substr(a, b - a);
      EXPECT_TRUE(allowed.count(flag)) << "--help shows " << flag << ", which is no TOML key";
      shown.insert(flag);
    }
  }
  for (const OptionSpec& s : LaunchOptionTable()) {
    EXPECT_TRUE(shown.count(FlagOf(s))) << FlagOf(s) << " (TOML " << s.key << ") is not in --help";
    const size_t at = help.find("  " + FlagOf(s) + (s.type == OptionType::kBool ? "" : " "));
    ASSERT_NE(at, std::string::npos) << s.key;
    const size_t next = help.find("\n  -", at + 1);
    EXPECT_NE(help.substr(at, next - at).find("(default: "), std::string::npos) << FlagOf(s) << " shows no default";
  }
  // Defaults that were not shown.
  auto entry = [&](const std::string& flag) {
    const size_t at = help.find("  " + flag + " ");
    return at == std::string::npos ? std::string() : help.substr(at, help.find("\n  -", at + 1) - at);
  };
  EXPECT_NE(entry("--gen").find("(default: 16)"), std::string::npos) << help;
  EXPECT_NE(entry("--context").find("(default: 4096)"), std::string::npos) << help;
  EXPECT_NE(entry("--io").find("(default: pread)"), std::string::npos) << help;
}

// Options parsed from `args` after a TOML holding `toml`, without CheckOptions.
class TableFlags : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("k3-option-table-test-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  LaunchOptions Read(const std::string& toml, std::vector<std::string> args) {
    const std::string path = (dir_ / "c.toml").string();
    std::ofstream out(path);
    for (const char* line : {"model = \"/m\"\n", "budget = \"1G\"\n"})  // unless `toml` sets the key
      if (toml.find(std::string(line).substr(0, std::string(line).find(' '))) != 0) out << line;
    out << toml;
    out.close();
    args.insert(args.begin(), {"k3-launch", path});
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    return *ReadLaunchOptions(static_cast<int>(argv.size()), argv.data());
  }
  std::filesystem::path dir_;
};

// One value of each type, as a flag and as TOML text, that differs from every default.
struct Example {
  std::vector<std::string> flag_args;
  std::string toml_value;
};
Example ExampleOf(const OptionSpec& s) {
  const std::string f = FlagOf(s);
  switch (s.type) {
    case OptionType::kString: return {{f, "x7"}, "\"x7\""};
    case OptionType::kPath: return {{f, "/abs/p7"}, "\"/abs/p7\""};  // absolute: the same from either
    case OptionType::kOutput: return {{f, "out7"}, "\"out7\""};
    case OptionType::kSize: return {{f, "32M"}, "\"32M\""};
    case OptionType::kInt: return {{f, "7"}, "7"};
    case OptionType::kNumber: return {{f, "0.25"}, "0.25"};
    case OptionType::kSeed: return {{f, "7"}, "7"};
    case OptionType::kBool:
      return NegationOf(s).empty() ? Example{{f}, "true"} : Example{{NegationOf(s)}, "false"};
    case OptionType::kStrings: return {{f, "tcp://a:1", f, "tcp://b:2"}, "[\"tcp://a:1\", \"tcp://b:2\"]"};
    case OptionType::kPaths: return {{f, "/abs/a", f, "/abs/b"}, "[\"/abs/a\", \"/abs/b\"]"};
    case OptionType::kTexts: return {{f, "a b", f, "c"}, "[\"a b\", \"c\"]"};
    case OptionType::kIds: return {{f, "3,4", s.one_flag, "5"}, "[3, 4, 5]"};
  }
  return {};
}

// Every flag is accepted and sets exactly what its TOML key sets (the flag --prefill-chunk, for
// one, was refused while the key worked).
TEST_F(TableFlags, EveryFlagSetsWhatItsKeySets) {
  const LaunchOptions base = Read("", {});
  for (const OptionSpec& s : LaunchOptionTable()) {
    SCOPED_TRACE(s.key);
    const Example e = ExampleOf(s);
    LaunchOptions by_flag, by_toml;
    try {
      by_flag = Read("", e.flag_args);
      by_toml = Read(s.key + " = " + e.toml_value + "\n", {});
    } catch (const Error& err) {
      ADD_FAILURE() << err.what();
      continue;
    }
    LaunchOptions b = base;
    EXPECT_NE(ValueText(s, by_flag), ValueText(s, b)) << "the flag changed nothing";
    EXPECT_EQ(ValueText(s, by_flag), ValueText(s, by_toml));
    if (s.given) {
      EXPECT_TRUE(*s.given(by_flag));
      EXPECT_TRUE(*s.given(by_toml));
    }
  }
}

// The flag wins over the key; a flag of the prompt group replaces the whole group.
TEST_F(TableFlags, FlagsWinAndGroupsReplace) {
  const LaunchOptions o = Read("prefill_chunk = 16\nfull_recompute = false\nids = \"1,2\"\n",
                               {"--prefill-chunk", "8", "--full-recompute", "--prompt", "hi"});
  EXPECT_EQ(o.prefill_chunk, 8);
  EXPECT_TRUE(o.full_recompute);
  EXPECT_EQ(o.prompt, "hi");
  EXPECT_EQ(o.ids, "");
  const LaunchOptions hints = Read("prefetch_hints = false\n", {"--prefetch-hints"});
  EXPECT_TRUE(hints.prefetch_hints);
  EXPECT_FALSE(Read("", {"--no-prefetch-hints"}).prefetch_hints);
  EXPECT_EQ(Read("", {"--tokenizer", "/t", "--expert-server-timeout", "2.5", "--max-pinned-trunk", "100"}).tokenizer,
            "/t");
  EXPECT_THROW(Read("", {"--prompt", "a", "--ids", "1"}), Error);
}

// The shipped configs use only keys of the table, each with its type.
TEST(OptionTable, ConfigsAreValid) {
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator(std::string(K3_SOURCE_DIR) + "/configs")) {
    if (e.path().extension() != ".toml") continue;
    SCOPED_TRACE(e.path().string());
    LaunchOptions o;
    EXPECT_NO_THROW(ApplyToml(ReadFile(e.path().string()), e.path().string(), e.path().parent_path().string(), o));
    ++n;
  }
  EXPECT_GE(n, 1);
}

}  // namespace
}  // namespace k3::launch
