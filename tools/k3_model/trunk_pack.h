// The coded trunk (docs/k3-model.md "pack-trunk"; docs/formats.md "Coded trunk"): written once
// from a release, verified on its own.
#pragma once
#include <cstdint>
#include <string>

namespace k3::model_tool {

struct PackSummary {
  uint64_t runs = 0, source_bytes = 0, coded_bytes = 0, file_bytes = 0;
  double seconds = 0;
};

// Codes every trunk byte of SRC (codec::PlanCodedRuns) into DST (absent or an empty directory):
// the data file through a temporary renamed into place, then the manifest, last. `threads` runs
// are read, coded and hashed at once. UsageError for a DST that is not empty; BadModel for a
// SRC that is not a valid model; Error(kExitOutput) when DST cannot be written.
PackSummary PackTrunk(const std::string& src, const std::string& dst, int threads);

// True when `dir` holds a coded trunk manifest (k3-model check then checks a coded trunk).
bool IsCodedTrunkDir(const std::string& dir);

// Checks the coded trunk in `dir`: the manifest, the data file's header and size, and every run:
// its coded bytes against their digest, then decoded (every frame checked) against the digest
// of the release's bytes. Prints what it found; BadModel (exit 3) naming the run on the first
// defect, RuntimeFailure (exit 1) on a read error. With `release` (a model directory), also that
// the coded trunk is that model's: its layout (codec::CheckCodedTrunkFits) and the digest of each
// run's bytes read from its shards. Returns kExitOk.
int CheckCodedTrunk(const std::string& dir, const std::string& release, int threads);

}  // namespace k3::model_tool
