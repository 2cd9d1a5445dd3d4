// `k3-model check DIR [--digests]`: is DIR a complete release (every shard present with the
// size its manifest records, every header and index entry valid, every tensor the config
// implies present; with --digests every routed expert's SHA-256 equal to the manifest's) or a
// trunk-only copy; and what budget this machine's RAM suggests (the memory plan's floor and
// the budget that holds every expert), and its free disk. Like the C engine's doctor script,
// it informs: problems with the model are BadModel (exit 3), one line.
#pragma once
#include <string>

namespace k3::model_tool {

// Prints the report on stdout; returns the exit code (0: DIR is usable as what it is).
int CheckModel(const std::string& dir, bool digests, int threads);

}  // namespace k3::model_tool
