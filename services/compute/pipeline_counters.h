// What compute's pipeline weight sources count (pipeline_sources.h) and its Stats report
// (scheduler.h).
#pragma once
#include <cstdint>

#include "common/ipc/zmq_channel.h"

namespace k3::compute {

struct PipelineCounters {
  double trunk_wait_seconds = 0, expert_wait_seconds = 0;
  uint64_t trunk_streamed_bytes = 0;  // ring layers used (each use counted)
  uint64_t layer_wants = 0, expert_requests = 0, expert_rerequests = 0;
  uint64_t stale_refs = 0;            // references found stale before or after use
  uint64_t hints_sent = 0;            // next-layer guesses sent to the fetcher (Prefetch priority)
  ipc::RejectCounter rejects;
};

}  // namespace k3::compute
