// Comma-separated lists of non-negative integers, as --ids, --pin and the tokenizer's id files
// spell them: "3,0,7" -> {3, 0, 7}, in the given order, duplicates kept.
//
// Accepted: decimal digits separated by single commas, each value below `limit`. Nothing else:
// no spaces, no sign (so no negative ids), no empty item (so no leading, trailing or doubled
// comma), no value at or above `limit` (which also catches what would overflow). The empty text
// is the empty list; callers that need at least one id say so. Anything else throws
// k3::Error(code, "<what>: ...") naming the offending item.
#pragma once
#include <cstdint>
#include <string_view>
#include <vector>

#include "common/error.h"

namespace k3 {

std::vector<int64_t> ParseIdList(std::string_view text, std::string_view what, int64_t limit,
                                 ExitCode code = kExitUsage);

}  // namespace k3
