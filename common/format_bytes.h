// Byte counts as people read them, for every binary's lines and the memory plan's table:
// "2.19 GiB", "64.0 MiB", "4096 B" (binary units; below 1 MiB in bytes).
#pragma once
#include <cstdint>
#include <string>

namespace k3 {

std::string FormatBytes(int64_t bytes);

}  // namespace k3
