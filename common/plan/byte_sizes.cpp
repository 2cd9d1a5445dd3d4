#include "common/plan/byte_sizes.h"

#include <cctype>
#include <cstdio>
#include <fstream>
#include <stdexcept>

#include "common/error.h"
#include "common/plan/trunk_pieces.h"
#include "common/read_window.h"

namespace k3::plan {

int64_t ParseTrunkPiece(const std::string& text) {
  if (text == "layer") return kTrunkPieceLayer;
  int64_t v = 0;
  try {
    v = text == "auto" ? -1 : ParseBudget(text);
  } catch (const Error&) {
    v = -1;
  }
  if (v < static_cast<int64_t>(kReadAlign)) throw UsageError("trunk_piece (--trunk-piece) '" + text + "': must be \"layer\" or a size of at least 4096 bytes (64M, 1G)");
  return v;
}

int64_t ParsePrefixCache(const std::string& text, const std::string& what, bool allow_auto) {
  if (text == "0" || text == "off") return 0;
  if (text == "auto") {
    if (allow_auto) return kPrefixCacheAuto;
    throw UsageError(what + " auto: give a size (e.g. 512M) or 0");
  }
  try {
    return ParseBudget(text);
  } catch (const Error&) {
    throw UsageError(what + ": bad size '" + text + "' (expected e.g. 512M, 2G, 0 for off" + (allow_auto ? ", or auto)" : ")"));
  }
}

int64_t ParseBudget(const std::string& text) {
  if (text == "auto") {
    std::ifstream in("/proc/meminfo");
    std::string key;
    int64_t kb = 0;
    std::string unit;
    while (in >> key >> kb >> unit)
      if (key == "MemAvailable:") return kb * 1024;
    throw RuntimeFailure("--budget auto: MemAvailable not found in /proc/meminfo");
  }
  const auto bad = [&] { return UsageError("bad size '" + text + "' (expected e.g. 32G, 512M, 1.5T or auto)"); };
  size_t pos = 0;
  while (pos < text.size() && (std::isdigit(static_cast<unsigned char>(text[pos])) || text[pos] == '.')) ++pos;
  if (pos == 0) throw bad();
  double value = 0;
  try {
    size_t used = 0;
    value = std::stod(text.substr(0, pos), &used);
    if (used != pos) throw bad();
  } catch (const std::logic_error&) {
    throw bad();
  }
  std::string unit = text.substr(pos);
  for (auto& ch : unit) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  if (unit.size() >= 2 && unit.substr(unit.size() - 2) == "IB") unit.resize(unit.size() - 2);
  else if (unit.size() == 2 && unit[1] == 'B') unit.resize(1);
  double mult = 1;
  if (unit == "K") mult = 1ll << 10;
  else if (unit == "M") mult = 1ll << 20;
  else if (unit == "G") mult = 1ll << 30;
  else if (unit == "T") mult = 1ll << 40;
  else if (!unit.empty() && unit != "B") throw bad();
  const double bytes = value * mult;
  if (!(bytes >= 1) || bytes > 9.0e18) throw bad();
  return static_cast<int64_t>(bytes);
}

}  // namespace k3::plan
