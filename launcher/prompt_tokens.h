// Interim prompt encoding for k3-launch: the tokenizer library linked directly until the
// k3-tokenizer service exists (then these become requests on ipc://RUN/tokenizer).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace k3::launch {

std::vector<int32_t> EncodePrompt(const std::string& tokenizer_dir, const std::string& text);
std::string DecodeIds(const std::string& tokenizer_dir, const std::vector<int32_t>& ids);

}  // namespace k3::launch
