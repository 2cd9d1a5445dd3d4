// Encoding and decoding of every message in proto/*.fbs, and nothing else touches FlatBuffers.
//
// On the wire a message is two ZeroMQ frames: a 2-byte kind frame {protocol, union type} and
// the FlatBuffers payload (a size-prefixed Envelope whose root union holds the message; the
// prefix must equal the frame length, so a truncated or padded frame fails). Decoding always
// runs the FlatBuffers verifier (release builds too), checks the file identifier, the size
// limit, that the kind frame agrees with the union type, and enum ranges; any failure is a
// Result with a one-line reason, never an exception or a crash.
//
// Thread-safety: all functions are pure and may be called from any thread.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/ipc/messages.h"
#include "common/ipc/result.h"

namespace k3::ipc {

// First byte of the kind frame: which schema the payload belongs to.
enum class Protocol : uint8_t { kControl = 1, kWeights = 2, kExperts = 3, kCompute = 4, kTokenizer = 5 };

struct Kind {
  Protocol protocol = Protocol::kControl;
  uint8_t type = 0;  // the FlatBuffers union type of the message (1-based)
  std::array<uint8_t, 2> bytes() const { return {static_cast<uint8_t>(protocol), type}; }
  bool operator==(const Kind&) const = default;
};

// "control.Hello"; "<bad kind>" for unknown values (safe on untrusted input).
std::string KindName(Kind k);

// Payloads above these sizes are rejected before verification. Control-type messages carry
// only ids and counters; Generate may carry a long prompt (4M ids).
inline constexpr size_t kMaxSmallPayload = 64 * 1024;
inline constexpr size_t kMaxComputePayload = 16u * 1024 * 1024 + 4096;
// Encode carries a whole prompt text, EncodedIds/Decode its ids: the same bound as compute.
inline constexpr size_t kMaxTokenizerPayload = kMaxComputePayload;

struct Encoded {
  Kind kind;
  std::vector<uint8_t> payload;
};

// ---- encode: one function per message ----
Encoded Encode(const control::Hello& m);
Encoded Encode(const control::Ready& m);
Encoded Encode(const control::Shutdown& m);
Encoded Encode(const control::Dead& m);
Encoded Encode(const control::Stats& m);
Encoded Encode(const weights::LayerReady& m);
Encoded Encode(const weights::LayerDone& m);
Encoded Encode(const weights::LayerFailed& m);
Encoded Encode(const weights::LayerWant& m);
Encoded Encode(const weights::EmbedRows& m);
Encoded Encode(const weights::EmbedRowsReady& m);
Encoded Encode(const experts::ExpertRequest& m);
Encoded Encode(const experts::ExpertReady& m);
Encoded Encode(const experts::ExpertRelease& m);
Encoded Encode(const experts::ExpertFailed& m);
Encoded Encode(const experts::ExpertBytes& m);
Encoded Encode(const compute::Generate& m);
Encoded Encode(const compute::Token& m);
Encoded Encode(const compute::Done& m);
Encoded Encode(const compute::Cancel& m);
Encoded Encode(const compute::Ping& m);
Encoded Encode(const compute::Pong& m);
Encoded Encode(const compute::StateOp& m);
Encoded Encode(const compute::StateDone& m);
Encoded Encode(const compute::Step& m);
Encoded Encode(const tokenizer::Encode& m);
Encoded Encode(const tokenizer::EncodedIds& m);
Encoded Encode(const tokenizer::Decode& m);
Encoded Encode(const tokenizer::Decoded& m);
Encoded Encode(const tokenizer::RenderChat& m);
Encoded Encode(const tokenizer::Failed& m);
// Any alternative of a protocol's variant.
template <class Variant>
Encoded EncodeAny(const Variant& v) {
  return std::visit([](const auto& m) { return Encode(m); }, v);
}

// ---- decode: one entry per protocol; each verifies, then unpacks the one message ----
Result<control::Message> DecodeControl(std::span<const uint8_t> kind, std::span<const uint8_t> payload);
Result<weights::Message> DecodeWeights(std::span<const uint8_t> kind, std::span<const uint8_t> payload);
Result<experts::Message> DecodeExperts(std::span<const uint8_t> kind, std::span<const uint8_t> payload);
Result<compute::Message> DecodeCompute(std::span<const uint8_t> kind, std::span<const uint8_t> payload);
Result<tokenizer::Message> DecodeTokenizer(std::span<const uint8_t> kind, std::span<const uint8_t> payload);

// Checksum carried by ExpertBytes (XXH3_64bits, seed 0).
uint64_t ExpertChecksum(std::span<const uint8_t> bytes);
// True when `bytes` is exactly what header `h` announces (length and checksum).
bool ExpertBytesMatch(const experts::ExpertBytes& h, std::span<const uint8_t> bytes);

}  // namespace k3::ipc
