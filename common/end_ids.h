// The ids that end a message by default: config.json's eos_token_id (one id or a list) and,
// when a tokenizer directory is given, the ids its tokenizer_config.json gives "[EOS]" and
// "<|end_of_msg|>" (the K3 release names a different end id in each file; all of them end a
// run). Used by k3-launch and k3-compute --standalone.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "common/model_config.h"

namespace k3 {

// Sorted, without repeats; ids outside [0, vocab_size) are left out (the model cannot emit
// them). `tokenizer_dir` empty: config.json's ids only. A tokenizer_config.json that cannot be
// read or parsed is k3::Error(kExitBadInput) naming the file.
std::vector<int32_t> DefaultEndIds(const ModelConfig& cfg, const std::string& tokenizer_dir);

// Merges id lists into one sorted list without repeats.
std::vector<int32_t> MergeIds(std::vector<int32_t> a, const std::vector<int32_t>& b);

}  // namespace k3
