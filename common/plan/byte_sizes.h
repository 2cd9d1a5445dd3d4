// Sizes as the user writes them and as the plan prints them: budgets, trunk pieces and the
// prefix cache ("8G", "512M", "layer", "auto"); the plan table prints with k3::FormatBytes
// (common/format_bytes.h).
#pragma once
#include <cstdint>
#include <string>

namespace k3::plan {

// PlanOptions::prefix_cache: size it from the budget (PrefixCacheAutoBytes).
constexpr int64_t kPrefixCacheAuto = -1;

// "8G", "1.5T", "512M", "4096", "32GiB" (binary units) or "auto" (MemAvailable from
// /proc/meminfo). k3::Error(kExitUsage) on anything else.
int64_t ParseBudget(const std::string& text);
// --trunk-piece / trunk_piece: "layer" (kTrunkPieceLayer) or a size as ParseBudget reads it
// ("64M"), at least 4096. k3::Error(kExitUsage) on anything else.
int64_t ParseTrunkPiece(const std::string& text);
// prefix_cache / --prefix-cache: a size as for the budget ("512M"), "0" or "off", or "auto"
// (kPrefixCacheAuto; refused when !allow_auto). k3::Error(kExitUsage) naming `what` otherwise.
int64_t ParsePrefixCache(const std::string& text, const std::string& what, bool allow_auto);

}  // namespace k3::plan
