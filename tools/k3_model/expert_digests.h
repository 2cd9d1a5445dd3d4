// Digests of every routed expert of a checkpoint (the bytes of common/tensor_names.h
// ExpertRange, what k3-expert-server sends), read with pread and hashed on `threads` threads:
// a trusted copy is read once, at the disk's speed rather than one core's hashing speed.
#pragma once
#include <string>
#include <vector>

#include "common/manifest.h"
#include "common/model_config.h"
#include "common/safetensors.h"

namespace k3::model_tool {

// Digests in manifest order ((layer - first) * num_experts + expert). Progress goes to
// stderr as "[k3-model] <what>: N%" lines. RuntimeFailure naming the shard on a read error.
std::vector<ExpertDigest> DigestExperts(const Checkpoint& ck, const ModelConfig& cfg, int threads,
                                        const std::string& what);

// A manifest for `dir` (shard names and current sizes) with these digests.
Manifest MakeManifest(const Checkpoint& ck, const ModelConfig& cfg, std::vector<ExpertDigest> digests,
                      bool trunk_only);

// The number of hashing threads: the online cores, at least 1.
int DefaultThreads();

}  // namespace k3::model_tool
