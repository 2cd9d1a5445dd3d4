// Which of disk, decode and compute bound a generated token's step (the run summary and report,
// docs/pipeline.md "Run report"). A pure rule over per-token seconds the services measured.
#pragma once

namespace k3::launch {

// Compute's own work bounds the step when it waited for weights less than this share of it.
inline constexpr double kWaitShareBound = 0.1;

struct StepTimes {
  double step = 0;    // seconds per generated token
  double wait = 0;    // of it, compute waiting for trunk layers and experts
  double read = 0;    // the readers' disk-busy seconds per token (trunk reader + expert fetcher)
  double decode = 0;  // the trunk reader's decode seconds per token (0 without a coded trunk)
};

// "compute" when compute waited less than kWaitShareBound of the step (or the step is unknown);
// else the weights bound it: "decode" when decoding took longer than the disk reads were busy
// (the reader decodes while the disk reads on, so the longer one is the limit), else "disk".
const char* StepBound(const StepTimes& t);

}  // namespace k3::launch
