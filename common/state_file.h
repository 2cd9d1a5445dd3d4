// State files (docs/formats.md "State file"): compute's whole sequence state, so a later run
// continues it bit-identically. Versioned header, the model's identity (config.json bytes and the
// weight layout), expert_inputs, the context the state needs, the sequence's ids, the per-layer
// sections (KDA recurrent state + conv windows, MLA latent cache), opaque `extra` bytes and an
// XXH3-64 checksum over everything before it. Written atomically (temporary file + rename).
// The launcher reads it to refuse a bad file before any weight is read; compute to load it.
#pragma once
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "common/model_config.h"
#include "common/safetensors.h"

namespace k3::state {

inline constexpr char kMagic[8] = {'K', '3', 'S', 'T', 'A', 'T', 'E', '\0'};
inline constexpr uint32_t kVersion = 1;
inline constexpr int64_t kHeaderBytes = 80;  // fixed part before the ids

// Which model a state belongs to.
struct ModelIdentity {
  uint64_t config_hash = 0;  // XXH3-64 of config.json's bytes
  uint64_t layout_hash = 0;  // XXH3-64 of the tensor list and a sample of each shard's data
  bool operator==(const ModelIdentity&) const = default;
};

// config.json's bytes, and for every tensor in name order "name\0dtype\0d0,d1,...\n", then for
// every shard (in the checkpoint's order) the first min(4096, data bytes) bytes of its data
// section. Cheap: headers only plus one small read per shard.
ModelIdentity IdentifyModel(const std::string& model_dir, const Checkpoint& ck);
ModelIdentity IdentifyModel(const std::string& model_dir);  // opens the checkpoint's headers

// Floats of the per-layer sections for a sequence that consumed `position` tokens, in file
// order: per layer, KDA: S [heads][D][D], conv_q, conv_k, conv_v [P][K-1]; MLA: c [position]
// [kv_lora], k_pe [position][rope].
uint64_t BodyFloats(const ModelConfig& cfg, int64_t position);

struct StateInfo {
  ModelIdentity model;
  bool expert_inputs_bf16 = false;
  int64_t position = 0;        // tokens the layers have consumed
  std::vector<int32_t> ids;    // the sequence so far (ids.size() >= position; the rest is pending)
  std::string extra;           // opaque (the chat history)
};

// What a reader accepts.
struct Expect {
  const ModelConfig* cfg = nullptr;
  ModelIdentity model;
  bool expert_inputs_bf16 = false;
  int64_t context = 0;  // > 0: refuse a state with more ids than this
};

// Where the per-layer floats go: called once the header is known (with its position), returns
// the sections in file order; their sizes must add up to BodyFloats(cfg, position).
using SectionsFor = std::function<std::vector<std::span<float>>(int64_t position)>;

// Reads and checks the whole file (magic, version, size, checksum, model, expert inputs,
// context, ids). Any problem: BadInput (exit 7) "state file PATH: <reason>", one line.
// `sections` (optional) receive the per-layer floats straight from the file (what they hold
// is unspecified when it throws); without it the file is only checked (constant memory).
StateInfo ReadStateFile(const std::string& path, const Expect& want, const SectionsFor& sections = nullptr);

// Writes through an AtomicFile (common/user_file.h: a random O_EXCL temporary renamed over
// PATH; a non-regular PATH is refused). `body` holds the sections in file order
// (their sizes must add up to BodyFloats(cfg, info.position)). Error(kExitOutput) when it
// cannot be written; PATH is then untouched.
void WriteStateFile(const std::string& path, const ModelConfig& cfg, const StateInfo& info,
                    const std::vector<std::span<const float>>& body);

}  // namespace k3::state
