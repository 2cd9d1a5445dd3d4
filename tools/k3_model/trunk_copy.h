// `k3-model trunk-only SRC DST`: a copy of a checkpoint for a compute box whose routed experts
// come from k3-expert-server. Every file of SRC is copied; each shard keeps its size, header,
// offsets and index, but its routed-expert byte ranges are left as holes (ftruncate to the
// full size, then only the other ranges are written), so DST takes the trunk's disk space
// (~109 GB of the release's 1.56 TB). The manifest, written last, is marked trunk-only: holes
// do not survive every copy tool, and the engine must never read those zeros as experts.
#pragma once
#include <string>

namespace k3::model_tool {

// Returns the bytes written to DST's shards. UsageError when DST exists and is not an empty
// directory or SRC is itself trunk-only; BadModel for a bad SRC; RuntimeFailure on I/O errors.
uint64_t WriteTrunkOnlyCopy(const std::string& src, const std::string& dst, int threads);

}  // namespace k3::model_tool
