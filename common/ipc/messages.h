// Plain C++ mirrors of the FlatBuffers messages in proto/*.fbs (field meanings are documented
// there). Services build and read these; only protocol.cpp touches FlatBuffers.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace k3::ipc {

namespace control {
struct Stat {
  std::string name;
  double value = 0;
  bool operator==(const Stat&) const = default;
};
struct Hello {
  std::string service;
  int64_t pid = 0;
  bool operator==(const Hello&) const = default;
};
struct Ready {
  std::string service;
  std::vector<Stat> stats;
  bool operator==(const Ready&) const = default;
};
struct Shutdown {
  std::string reason;
  bool operator==(const Shutdown&) const = default;
};
struct Dead {
  std::string service;
  int32_t exit_code = 0;
  std::string reason;
  bool operator==(const Dead&) const = default;
};
struct Stats {
  std::string service;
  std::vector<Stat> stats;
  bool operator==(const Stats&) const = default;
};
using Message = std::variant<Hello, Ready, Shutdown, Dead, Stats>;
}  // namespace control

namespace weights {
enum class Error : uint8_t { kNone = 0, kReadFailed = 1, kOutOfRange = 2 };
struct LayerReady {
  int32_t layer = 0;
  int32_t slot = 0;
  uint64_t generation = 0;
  uint64_t offset = 0;
  uint64_t length = 0;
  int32_t piece = 0;   // docs/trunk-pieces.md: piece `piece` of `pieces` (a whole layer: 0 of 1)
  int32_t pieces = 1;
  bool operator==(const LayerReady&) const = default;
};
struct LayerDone {
  int32_t layer = 0;
  int32_t slot = 0;
  uint64_t generation = 0;
  int32_t piece = 0;
  bool operator==(const LayerDone&) const = default;
};
struct LayerFailed {
  int32_t layer = 0;
  Error error = Error::kNone;
  std::string detail;
  bool operator==(const LayerFailed&) const = default;
};
struct LayerWant {
  int32_t layer = 0;
  int32_t piece = 0;
  bool operator==(const LayerWant&) const = default;
};
struct EmbedRows {
  uint64_t request_id = 0;
  std::vector<int32_t> ids;
  bool operator==(const EmbedRows&) const = default;
};
struct EmbedRowsReady {
  uint64_t request_id = 0;
  std::vector<uint64_t> offsets;
  uint64_t row_bytes = 0;
  bool operator==(const EmbedRowsReady&) const = default;
};
using Message = std::variant<LayerReady, LayerDone, LayerFailed, LayerWant, EmbedRows, EmbedRowsReady>;
}  // namespace weights

namespace experts {
enum class Priority : uint8_t { kDemand = 0, kPrefetch = 1 };
enum class Error : uint8_t {
  kNone = 0, kReadFailed = 1, kOutOfRange = 2, kBadChecksum = 4, kNoSlot = 5  // 3 retired
};
struct ExpertRequest {
  uint64_t request_id = 0;
  int32_t layer = 0;
  std::vector<int32_t> experts;
  Priority priority = Priority::kDemand;
  bool operator==(const ExpertRequest&) const = default;
};
struct ExpertReady {
  uint64_t request_id = 0;
  int32_t layer = 0;
  int32_t expert = 0;
  int32_t slot = 0;
  uint64_t generation = 0;
  bool operator==(const ExpertReady&) const = default;
};
struct ExpertRelease {
  int32_t layer = 0;
  int32_t expert = 0;
  int32_t slot = 0;
  uint64_t generation = 0;
  bool operator==(const ExpertRelease&) const = default;
};
struct ExpertFailed {
  uint64_t request_id = 0;
  int32_t layer = 0;
  int32_t expert = 0;
  Error error = Error::kNone;
  std::string detail;
  bool operator==(const ExpertFailed&) const = default;
};
// Header of a remote expert transfer; the raw bytes follow in the next ZeroMQ frame.
struct ExpertBytes {
  uint64_t request_id = 0;
  int32_t layer = 0;
  int32_t expert = 0;
  uint64_t length = 0;
  uint64_t xxh3 = 0;
  bool operator==(const ExpertBytes&) const = default;
};
using Message = std::variant<ExpertRequest, ExpertReady, ExpertRelease, ExpertFailed, ExpertBytes>;
}  // namespace experts

namespace compute {
// Defaults mean greedy (proto/compute.fbs Sampling).
struct Sampling {
  float temperature = 0;
  int32_t top_k = 0;
  float top_p = 1.0f;
  float min_p = 0;
  float repeat_penalty = 1.0f;
  int32_t repeat_last_n = 64;
  float presence_penalty = 0;
  float frequency_penalty = 0;
  uint64_t seed = 0;
  bool operator==(const Sampling&) const = default;
};
// Output constrained to one JSON value (proto/compute.fbs Constraint).
struct Constraint {
  std::string schema;          // JSON Schema text
  std::vector<int32_t> after;  // forced once the value is complete; the last a stop id
  bool operator==(const Constraint&) const = default;
};
struct Generate {
  uint64_t request_id = 0;
  std::vector<int32_t> ids;
  int32_t gen = 0;
  bool full_recompute = false;
  int32_t prefill_chunk = 0;
  std::vector<int32_t> stop_ids;
  bool keep_state = false;
  int32_t max_positions = 0;
  Sampling sampling;
  int32_t logprobs = -1;
  bool perplexity = false;
  int32_t spec = 0;
  int32_t snapshot_at = 0;  // 0 < N < ids.size(): a prefix snapshot after ids[0..N) too (chat: the preamble's end)
  uint64_t cache_partition = 0;  // prefix snapshots are shared only within one partition (0: the shared one)
  std::optional<Constraint> constraint;  // absent: unconstrained
  bool operator==(const Generate&) const = default;
};
struct TopLogprob {
  int32_t id = 0;
  float logprob = 0;
  bool operator==(const TopLogprob&) const = default;
};
struct Token {
  uint64_t request_id = 0;
  int32_t id = 0;
  int32_t index = 0;
  float logprob = 0;
  std::vector<TopLogprob> top;
  bool operator==(const Token&) const = default;
};
struct RunStats {
  int32_t prompt_tokens = 0;
  int32_t generated_tokens = 0;
  double prefill_seconds = 0;
  double seconds_per_token = 0;
  int32_t position = 0;
  int32_t scored_tokens = 0;
  double nll_sum = 0;
  int32_t spec_drafted = 0;
  int32_t spec_accepted = 0;
  int32_t cached_tokens = 0;
  bool operator==(const RunStats&) const = default;
};
enum class StopReason : uint8_t { kLength = 0, kStopId = 1, kInterrupted = 2, kCancelled = 3 };
struct Done {
  uint64_t request_id = 0;
  RunStats stats;
  StopReason reason = StopReason::kLength;
  bool operator==(const Done&) const = default;
};
struct Cancel {
  uint64_t request_id = 0;
  bool operator==(const Cancel&) const = default;
};
enum class StateAction : uint8_t { kSave = 0, kLoad = 1, kReset = 2 };
struct StateOp {
  uint64_t request_id = 0;
  StateAction action = StateAction::kSave;
  std::string path;   // bytes
  std::string extra;  // bytes
  bool operator==(const StateOp&) const = default;
};
struct StateDone {
  uint64_t request_id = 0;
  bool ok = false;
  std::string error;
  int32_t position = 0;
  std::vector<int32_t> ids;
  std::string extra;  // bytes
  bool operator==(const StateDone&) const = default;
};
struct Step {
  int32_t sequences = 0;
  int32_t rows = 0;
  int32_t prefill_rows = 0;
  double seconds = 0;
  int32_t experts = 0;
  int64_t trunk_bytes = 0;
  int64_t expert_bytes = 0;
  std::vector<uint64_t> request_ids;
  bool operator==(const Step&) const = default;
};
struct Ping {
  uint64_t nonce = 0;
  bool operator==(const Ping&) const = default;
};
struct Pong {
  uint64_t nonce = 0;
  bool operator==(const Pong&) const = default;
};
using Message = std::variant<Generate, Token, Done, Cancel, StateOp, StateDone, Step, Ping, Pong>;
}  // namespace compute

namespace tokenizer {
enum class Error : uint8_t { kNone = 0, kBadInput = 1, kUnknownId = 2, kUnsupported = 3, kTooLarge = 4 };
enum class ToolChoice : uint8_t { kAuto = 0, kNone = 1, kRequired = 2, kNamed = 3 };
struct Encode {
  uint64_t request_id = 0;
  std::string text;  // bytes, not necessarily UTF-8
  bool allow_special = false;
  bool operator==(const Encode&) const = default;
};
struct EncodedIds {
  uint64_t request_id = 0;
  std::vector<int32_t> ids;
  bool operator==(const EncodedIds&) const = default;
};
struct Decode {
  uint64_t request_id = 0;
  std::vector<int32_t> ids;
  bool stream = false;
  bool final = false;
  bool operator==(const Decode&) const = default;
};
struct Decoded {
  uint64_t request_id = 0;
  std::string text;  // bytes
  bool operator==(const Decoded&) const = default;
};
struct RenderChat {
  uint64_t request_id = 0;
  std::string history_jsonl;
  bool thinking = true;
  std::string thinking_effort;
  std::string tools_json;  // bytes: a JSON array, or empty
  ToolChoice tool_choice = ToolChoice::kAuto;
  bool continue_final = false;
  std::string forced_call;  // "" none
  bool operator==(const RenderChat&) const = default;
};
struct Failed {
  uint64_t request_id = 0;
  Error error = Error::kNone;
  std::string detail;
  bool operator==(const Failed&) const = default;
};
using Message = std::variant<Encode, EncodedIds, Decode, Decoded, RenderChat, Failed>;
}  // namespace tokenizer

}  // namespace k3::ipc
