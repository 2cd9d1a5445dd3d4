// Compute's side of state files (common/state_file.h): a SequenceState and the sequence's ids
// to the file's sections and back.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "common/state_file.h"
#include "state.h"

namespace k3::compute {

struct SavedSequence {
  SequenceState state;
  std::vector<int32_t> ids;  // the whole sequence; ids[state.position..] are not consumed yet
  std::string extra;
};

// Writes `s` (atomically). Error(kExitOutput) when the file cannot be written.
void SaveSequence(const std::string& path, const ModelConfig& cfg, const state::ModelIdentity& model,
                  const SequenceState& s, const std::vector<int32_t>& ids, const std::string& extra);

// Reads and checks a file (BadInput "state file PATH: ..." on any problem). context > 0:
// refuse a state with more ids than that.
SavedSequence LoadSequence(const std::string& path, const ModelConfig& cfg, const state::ModelIdentity& model,
                           int64_t context);

// The same straight into `into` (reset first; its buffers are reused, so no second sequence
// state exists): returns the file's ids and extra. On a throw `into` holds unspecified values
// (the caller resets it).
state::StateInfo LoadSequenceInto(const std::string& path, const ModelConfig& cfg, const state::ModelIdentity& model,
                                  int64_t context, SequenceState& into);

}  // namespace k3::compute
