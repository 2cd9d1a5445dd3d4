#include "common/ipc/protocol.h"

#include <xxhash.h>

#include <cstring>
#include <memory>

#include "k3proto/compute_generated.h"
#include "k3proto/control_generated.h"
#include "k3proto/experts_generated.h"
#include "k3proto/tokenizer_generated.h"
#include "k3proto/weights_generated.h"

namespace k3::ipc {
namespace {

namespace fbc = k3::proto::control;
namespace fbw = k3::proto::weights;
namespace fbe = k3::proto::experts;
namespace fbp = k3::proto::compute;
namespace fbt = k3::proto::tokenizer;
using flatbuffers::FlatBufferBuilder;

// The C++ enums mirror the schema enums value for value; the casts below rely on it.
static_assert(static_cast<int>(fbw::Error::OutOfRange) == static_cast<int>(weights::Error::kOutOfRange));
static_assert(static_cast<int>(fbe::Error::BadChecksum) == static_cast<int>(experts::Error::kBadChecksum));
static_assert(static_cast<int>(fbp::StopReason::Cancelled) == static_cast<int>(compute::StopReason::kCancelled));
static_assert(static_cast<int>(fbp::StateAction::Reset) == static_cast<int>(compute::StateAction::kReset));
static_assert(static_cast<int>(fbe::Error::NoSlot) == static_cast<int>(experts::Error::kNoSlot));
static_assert(static_cast<int>(fbe::Priority::Prefetch) == static_cast<int>(experts::Priority::kPrefetch));
static_assert(static_cast<int>(fbt::Error::Unsupported) == static_cast<int>(tokenizer::Error::kUnsupported));
static_assert(static_cast<int>(fbt::Error::TooLarge) == static_cast<int>(tokenizer::Error::kTooLarge));

template <class UnionType>
Encoded Finish(FlatBufferBuilder& fbb, Protocol p, UnionType t) {
  Encoded e;
  e.kind = Kind{p, static_cast<uint8_t>(t)};
  e.payload.assign(fbb.GetBufferPointer(), fbb.GetBufferPointer() + fbb.GetSize());
  return e;
}

std::string Str(const flatbuffers::String* s) { return s ? s->str() : std::string(); }

// Text travels as [ubyte] (prompts need not be UTF-8, which FlatBuffers strings require).
std::string Bytes(const flatbuffers::Vector<uint8_t>* v) {
  return v ? std::string(reinterpret_cast<const char*>(v->data()), v->size()) : std::string();
}
flatbuffers::Offset<flatbuffers::Vector<uint8_t>> BytesVec(FlatBufferBuilder& fbb, const std::string& s) {
  return fbb.CreateVector(reinterpret_cast<const uint8_t*>(s.data()), s.size());
}

template <class T>
std::vector<T> Vec(const flatbuffers::Vector<T>* v) {
  return v ? std::vector<T>(v->begin(), v->end()) : std::vector<T>();
}

flatbuffers::Offset<flatbuffers::Vector<flatbuffers::Offset<fbc::Stat>>> StatVec(
    FlatBufferBuilder& fbb, const std::vector<control::Stat>& stats) {
  std::vector<flatbuffers::Offset<fbc::Stat>> offs;
  offs.reserve(stats.size());
  for (const auto& s : stats) offs.push_back(fbc::CreateStatDirect(fbb, s.name.c_str(), s.value));
  return fbb.CreateVector(offs);
}

std::vector<control::Stat> StatsFrom(const flatbuffers::Vector<flatbuffers::Offset<fbc::Stat>>* v) {
  std::vector<control::Stat> out;
  if (!v) return out;
  for (const auto* s : *v) out.push_back({Str(s->name()), s->value()});
  return out;
}

// Checks shared by every protocol, then hands an aligned, verified root to `unpack`.
// Messages from ZeroMQ are not guaranteed 8-byte aligned (small ones live inside the
// zmq_msg_t), and the verifier insists on alignment, so misaligned payloads are copied.
template <class Root, class Msg, class VerifyFn, class UnpackFn>
Result<Msg> DecodeWith(Protocol p, size_t max_bytes, std::span<const uint8_t> kind,
                       std::span<const uint8_t> payload, VerifyFn verify, UnpackFn unpack) {
  if (kind.size() != 2) return Result<Msg>::Fail("kind frame has " + std::to_string(kind.size()) + " bytes, want 2");
  if (kind[0] != static_cast<uint8_t>(p))
    return Result<Msg>::Fail("kind frame names protocol " + std::to_string(kind[0]) + ", want " +
                             std::to_string(static_cast<int>(p)));
  if (payload.size() > max_bytes)
    return Result<Msg>::Fail("payload of " + std::to_string(payload.size()) + " bytes exceeds limit " +
                             std::to_string(max_bytes));
  if (payload.size() < 8) return Result<Msg>::Fail("payload of " + std::to_string(payload.size()) + " bytes is truncated");
  std::unique_ptr<uint64_t[]> copy;
  const uint8_t* data = payload.data();
  if (reinterpret_cast<uintptr_t>(data) % 8 != 0) {
    copy.reset(new uint64_t[(payload.size() + 7) / 8]);
    std::memcpy(copy.get(), payload.data(), payload.size());
    data = reinterpret_cast<const uint8_t*>(copy.get());
  }
  flatbuffers::Verifier verifier(data, payload.size(), /*max_depth=*/16, /*max_tables=*/4096);
  if (!verify(verifier)) return Result<Msg>::Fail("payload failed FlatBuffers verification");
  const Root* root = flatbuffers::GetSizePrefixedRoot<Root>(data);
  const uint8_t union_type = static_cast<uint8_t>(root->message_type());
  if (union_type == 0 || root->message() == nullptr) return Result<Msg>::Fail("envelope holds no message");
  if (union_type != kind[1])
    return Result<Msg>::Fail("kind frame says " + KindName(Kind{p, kind[1]}) + " but payload holds " +
                             KindName(Kind{p, union_type}));
  return unpack(root);
}

}  // namespace

std::string KindName(Kind k) {
  const auto t = k.type;
  switch (k.protocol) {
    case Protocol::kControl:
      if (t >= 1 && t <= static_cast<uint8_t>(fbc::Message::MAX))
        return std::string("control.") + fbc::EnumNameMessage(static_cast<fbc::Message>(t));
      break;
    case Protocol::kWeights:
      if (t >= 1 && t <= static_cast<uint8_t>(fbw::Message::MAX))
        return std::string("weights.") + fbw::EnumNameMessage(static_cast<fbw::Message>(t));
      break;
    case Protocol::kExperts:
      if (t >= 1 && t <= static_cast<uint8_t>(fbe::Message::MAX))
        return std::string("experts.") + fbe::EnumNameMessage(static_cast<fbe::Message>(t));
      break;
    case Protocol::kCompute:
      if (t >= 1 && t <= static_cast<uint8_t>(fbp::Message::MAX))
        return std::string("compute.") + fbp::EnumNameMessage(static_cast<fbp::Message>(t));
      break;
    case Protocol::kTokenizer:
      if (t >= 1 && t <= static_cast<uint8_t>(fbt::Message::MAX))
        return std::string("tokenizer.") + fbt::EnumNameMessage(static_cast<fbt::Message>(t));
      break;
  }
  return "<bad kind " + std::to_string(static_cast<int>(k.protocol)) + "." + std::to_string(t) + ">";
}

// ============================== control ==============================

Encoded Encode(const control::Hello& m) {
  FlatBufferBuilder fbb(128);
  auto msg = fbc::CreateHelloDirect(fbb, m.service.c_str(), m.pid);
  fbc::FinishSizePrefixedEnvelopeBuffer(fbb, fbc::CreateEnvelope(fbb, fbc::Message::Hello, msg.Union()));
  return Finish(fbb, Protocol::kControl, fbc::Message::Hello);
}
Encoded Encode(const control::Ready& m) {
  FlatBufferBuilder fbb(256);
  auto stats = StatVec(fbb, m.stats);
  auto msg = fbc::CreateReady(fbb, fbb.CreateString(m.service), stats);
  fbc::FinishSizePrefixedEnvelopeBuffer(fbb, fbc::CreateEnvelope(fbb, fbc::Message::Ready, msg.Union()));
  return Finish(fbb, Protocol::kControl, fbc::Message::Ready);
}
Encoded Encode(const control::Shutdown& m) {
  FlatBufferBuilder fbb(128);
  auto msg = fbc::CreateShutdownDirect(fbb, m.reason.c_str());
  fbc::FinishSizePrefixedEnvelopeBuffer(fbb, fbc::CreateEnvelope(fbb, fbc::Message::Shutdown, msg.Union()));
  return Finish(fbb, Protocol::kControl, fbc::Message::Shutdown);
}
Encoded Encode(const control::Dead& m) {
  FlatBufferBuilder fbb(128);
  auto msg = fbc::CreateDeadDirect(fbb, m.service.c_str(), m.exit_code, m.reason.c_str());
  fbc::FinishSizePrefixedEnvelopeBuffer(fbb, fbc::CreateEnvelope(fbb, fbc::Message::Dead, msg.Union()));
  return Finish(fbb, Protocol::kControl, fbc::Message::Dead);
}
Encoded Encode(const control::Stats& m) {
  FlatBufferBuilder fbb(256);
  auto stats = StatVec(fbb, m.stats);
  auto msg = fbc::CreateStats(fbb, fbb.CreateString(m.service), stats);
  fbc::FinishSizePrefixedEnvelopeBuffer(fbb, fbc::CreateEnvelope(fbb, fbc::Message::Stats, msg.Union()));
  return Finish(fbb, Protocol::kControl, fbc::Message::Stats);
}

Result<control::Message> DecodeControl(std::span<const uint8_t> kind, std::span<const uint8_t> payload) {
  using R = Result<control::Message>;
  return DecodeWith<fbc::Envelope, control::Message>(
      Protocol::kControl, kMaxSmallPayload, kind, payload,
      [](flatbuffers::Verifier& v) { return fbc::VerifySizePrefixedEnvelopeBuffer(v); },
      [](const fbc::Envelope* e) -> R {
        switch (e->message_type()) {
          case fbc::Message::Hello: {
            const auto* m = e->message_as_Hello();
            return R::Ok(control::Hello{Str(m->service()), m->pid()});
          }
          case fbc::Message::Ready: {
            const auto* m = e->message_as_Ready();
            return R::Ok(control::Ready{Str(m->service()), StatsFrom(m->stats())});
          }
          case fbc::Message::Shutdown:
            return R::Ok(control::Shutdown{Str(e->message_as_Shutdown()->reason())});
          case fbc::Message::Dead: {
            const auto* m = e->message_as_Dead();
            return R::Ok(control::Dead{Str(m->service()), m->exit_code(), Str(m->reason())});
          }
          case fbc::Message::Stats: {
            const auto* m = e->message_as_Stats();
            return R::Ok(control::Stats{Str(m->service()), StatsFrom(m->stats())});
          }
          default:
            return R::Fail("unknown control message type");
        }
      });
}

// ============================== weights ==============================

Encoded Encode(const weights::LayerReady& m) {
  FlatBufferBuilder fbb(96);
  auto msg = fbw::CreateLayerReady(fbb, m.layer, m.slot, m.generation, m.offset, m.length, m.piece, m.pieces);
  fbw::FinishSizePrefixedEnvelopeBuffer(fbb, fbw::CreateEnvelope(fbb, fbw::Message::LayerReady, msg.Union()));
  return Finish(fbb, Protocol::kWeights, fbw::Message::LayerReady);
}
Encoded Encode(const weights::LayerDone& m) {
  FlatBufferBuilder fbb(64);
  auto msg = fbw::CreateLayerDone(fbb, m.layer, m.slot, m.generation, m.piece);
  fbw::FinishSizePrefixedEnvelopeBuffer(fbb, fbw::CreateEnvelope(fbb, fbw::Message::LayerDone, msg.Union()));
  return Finish(fbb, Protocol::kWeights, fbw::Message::LayerDone);
}
Encoded Encode(const weights::LayerFailed& m) {
  FlatBufferBuilder fbb(128);
  auto msg = fbw::CreateLayerFailedDirect(fbb, m.layer, static_cast<fbw::Error>(m.error), m.detail.c_str());
  fbw::FinishSizePrefixedEnvelopeBuffer(fbb, fbw::CreateEnvelope(fbb, fbw::Message::LayerFailed, msg.Union()));
  return Finish(fbb, Protocol::kWeights, fbw::Message::LayerFailed);
}

Encoded Encode(const weights::LayerWant& m) {
  FlatBufferBuilder fbb(48);
  auto msg = fbw::CreateLayerWant(fbb, m.layer, m.piece);
  fbw::FinishSizePrefixedEnvelopeBuffer(fbb, fbw::CreateEnvelope(fbb, fbw::Message::LayerWant, msg.Union()));
  return Finish(fbb, Protocol::kWeights, fbw::Message::LayerWant);
}

Encoded Encode(const weights::EmbedRows& m) {
  FlatBufferBuilder fbb(64 + 4 * m.ids.size());
  auto msg = fbw::CreateEmbedRowsDirect(fbb, m.request_id, &m.ids);
  fbw::FinishSizePrefixedEnvelopeBuffer(fbb, fbw::CreateEnvelope(fbb, fbw::Message::EmbedRows, msg.Union()));
  return Finish(fbb, Protocol::kWeights, fbw::Message::EmbedRows);
}

Encoded Encode(const weights::EmbedRowsReady& m) {
  FlatBufferBuilder fbb(64 + 8 * m.offsets.size());
  auto msg = fbw::CreateEmbedRowsReadyDirect(fbb, m.request_id, &m.offsets, m.row_bytes);
  fbw::FinishSizePrefixedEnvelopeBuffer(fbb, fbw::CreateEnvelope(fbb, fbw::Message::EmbedRowsReady, msg.Union()));
  return Finish(fbb, Protocol::kWeights, fbw::Message::EmbedRowsReady);
}

Result<weights::Message> DecodeWeights(std::span<const uint8_t> kind, std::span<const uint8_t> payload) {
  using R = Result<weights::Message>;
  return DecodeWith<fbw::Envelope, weights::Message>(
      Protocol::kWeights, kMaxSmallPayload, kind, payload,
      [](flatbuffers::Verifier& v) { return fbw::VerifySizePrefixedEnvelopeBuffer(v); },
      [](const fbw::Envelope* e) -> R {
        switch (e->message_type()) {
          case fbw::Message::LayerReady: {
            const auto* m = e->message_as_LayerReady();
            return R::Ok(weights::LayerReady{m->layer(), m->slot(), m->generation(), m->offset(), m->length(), m->piece(), m->pieces()});
          }
          case fbw::Message::LayerDone: {
            const auto* m = e->message_as_LayerDone();
            return R::Ok(weights::LayerDone{m->layer(), m->slot(), m->generation(), m->piece()});
          }
          case fbw::Message::LayerFailed: {
            const auto* m = e->message_as_LayerFailed();
            if (m->error() > fbw::Error::MAX) return R::Fail("LayerFailed.error out of range");
            return R::Ok(weights::LayerFailed{m->layer(), static_cast<weights::Error>(m->error()), Str(m->detail())});
          }
          case fbw::Message::LayerWant:
            return R::Ok(weights::LayerWant{e->message_as_LayerWant()->layer(), e->message_as_LayerWant()->piece()});
          case fbw::Message::EmbedRows: {
            const auto* m = e->message_as_EmbedRows();
            return R::Ok(weights::EmbedRows{m->request_id(), Vec(m->ids())});
          }
          case fbw::Message::EmbedRowsReady: {
            const auto* m = e->message_as_EmbedRowsReady();
            return R::Ok(weights::EmbedRowsReady{m->request_id(), Vec(m->offsets()), m->row_bytes()});
          }
          default:
            return R::Fail("unknown weights message type");
        }
      });
}

// ============================== experts ==============================

Encoded Encode(const experts::ExpertRequest& m) {
  FlatBufferBuilder fbb(128 + 4 * m.experts.size());
  auto msg = fbe::CreateExpertRequestDirect(fbb, m.request_id, m.layer, &m.experts,
                                            static_cast<fbe::Priority>(m.priority));
  fbe::FinishSizePrefixedEnvelopeBuffer(fbb, fbe::CreateEnvelope(fbb, fbe::Message::ExpertRequest, msg.Union()));
  return Finish(fbb, Protocol::kExperts, fbe::Message::ExpertRequest);
}
Encoded Encode(const experts::ExpertReady& m) {
  FlatBufferBuilder fbb(96);
  auto msg = fbe::CreateExpertReady(fbb, m.request_id, m.layer, m.expert, m.slot, m.generation);
  fbe::FinishSizePrefixedEnvelopeBuffer(fbb, fbe::CreateEnvelope(fbb, fbe::Message::ExpertReady, msg.Union()));
  return Finish(fbb, Protocol::kExperts, fbe::Message::ExpertReady);
}
Encoded Encode(const experts::ExpertRelease& m) {
  FlatBufferBuilder fbb(96);
  auto msg = fbe::CreateExpertRelease(fbb, m.layer, m.expert, m.slot, m.generation);
  fbe::FinishSizePrefixedEnvelopeBuffer(fbb, fbe::CreateEnvelope(fbb, fbe::Message::ExpertRelease, msg.Union()));
  return Finish(fbb, Protocol::kExperts, fbe::Message::ExpertRelease);
}
Encoded Encode(const experts::ExpertFailed& m) {
  FlatBufferBuilder fbb(128);
  auto msg = fbe::CreateExpertFailedDirect(fbb, m.request_id, m.layer, m.expert,
                                           static_cast<fbe::Error>(m.error), m.detail.c_str());
  fbe::FinishSizePrefixedEnvelopeBuffer(fbb, fbe::CreateEnvelope(fbb, fbe::Message::ExpertFailed, msg.Union()));
  return Finish(fbb, Protocol::kExperts, fbe::Message::ExpertFailed);
}
Encoded Encode(const experts::ExpertBytes& m) {
  FlatBufferBuilder fbb(96);
  auto msg = fbe::CreateExpertBytes(fbb, m.request_id, m.layer, m.expert, m.length, m.xxh3);
  fbe::FinishSizePrefixedEnvelopeBuffer(fbb, fbe::CreateEnvelope(fbb, fbe::Message::ExpertBytes, msg.Union()));
  return Finish(fbb, Protocol::kExperts, fbe::Message::ExpertBytes);
}

Result<experts::Message> DecodeExperts(std::span<const uint8_t> kind, std::span<const uint8_t> payload) {
  using R = Result<experts::Message>;
  return DecodeWith<fbe::Envelope, experts::Message>(
      Protocol::kExperts, kMaxSmallPayload, kind, payload,
      [](flatbuffers::Verifier& v) { return fbe::VerifySizePrefixedEnvelopeBuffer(v); },
      [](const fbe::Envelope* e) -> R {
        switch (e->message_type()) {
          case fbe::Message::ExpertRequest: {
            const auto* m = e->message_as_ExpertRequest();
            if (m->priority() > fbe::Priority::MAX) return R::Fail("ExpertRequest.priority out of range");
            return R::Ok(experts::ExpertRequest{m->request_id(), m->layer(), Vec(m->experts()),
                                                static_cast<experts::Priority>(m->priority())});
          }
          case fbe::Message::ExpertReady: {
            const auto* m = e->message_as_ExpertReady();
            return R::Ok(experts::ExpertReady{m->request_id(), m->layer(), m->expert(), m->slot(), m->generation()});
          }
          case fbe::Message::ExpertRelease: {
            const auto* m = e->message_as_ExpertRelease();
            return R::Ok(experts::ExpertRelease{m->layer(), m->expert(), m->slot(), m->generation()});
          }
          case fbe::Message::ExpertFailed: {
            const auto* m = e->message_as_ExpertFailed();
            // MAX alone misses the retired value 3; a gap has an empty name.
            if (m->error() > fbe::Error::MAX || *fbe::EnumNameError(m->error()) == '\0')
              return R::Fail("ExpertFailed.error out of range");
            return R::Ok(experts::ExpertFailed{m->request_id(), m->layer(), m->expert(),
                                               static_cast<experts::Error>(m->error()), Str(m->detail())});
          }
          case fbe::Message::ExpertBytes: {
            const auto* m = e->message_as_ExpertBytes();
            return R::Ok(experts::ExpertBytes{m->request_id(), m->layer(), m->expert(), m->length(), m->xxh3()});
          }
          default:
            return R::Fail("unknown experts message type");
        }
      });
}

uint64_t ExpertChecksum(std::span<const uint8_t> bytes) { return XXH3_64bits(bytes.data(), bytes.size()); }

bool ExpertBytesMatch(const experts::ExpertBytes& h, std::span<const uint8_t> bytes) {
  return bytes.size() == h.length && ExpertChecksum(bytes) == h.xxh3;
}

// ============================== compute ==============================

Encoded Encode(const compute::Generate& m) {
  FlatBufferBuilder fbb(192 + 4 * (m.ids.size() + m.stop_ids.size()));
  const auto& s = m.sampling;
  auto sampling = fbp::CreateSampling(fbb, s.temperature, s.top_k, s.top_p, s.min_p, s.repeat_penalty,
                                      s.repeat_last_n, s.presence_penalty, s.frequency_penalty, s.seed);
  flatbuffers::Offset<fbp::Constraint> constraint = 0;
  if (m.constraint) constraint = fbp::CreateConstraintDirect(fbb, m.constraint->schema.c_str(), &m.constraint->after);
  auto msg = fbp::CreateGenerateDirect(fbb, m.request_id, &m.ids, m.gen, m.full_recompute, m.prefill_chunk,
                                       &m.stop_ids, m.keep_state, m.max_positions, sampling, m.logprobs,
                                       m.perplexity, m.spec, m.snapshot_at, m.cache_partition, constraint);
  fbp::FinishSizePrefixedEnvelopeBuffer(fbb, fbp::CreateEnvelope(fbb, fbp::Message::Generate, msg.Union()));
  return Finish(fbb, Protocol::kCompute, fbp::Message::Generate);
}
Encoded Encode(const compute::Token& m) {
  FlatBufferBuilder fbb(64 + 8 * m.top.size());
  std::vector<fbp::TopLogprob> top;
  top.reserve(m.top.size());
  for (const auto& t : m.top) top.emplace_back(t.id, t.logprob);
  auto msg = fbp::CreateTokenDirect(fbb, m.request_id, m.id, m.index, m.logprob, &top);
  fbp::FinishSizePrefixedEnvelopeBuffer(fbb, fbp::CreateEnvelope(fbb, fbp::Message::Token, msg.Union()));
  return Finish(fbb, Protocol::kCompute, fbp::Message::Token);
}
Encoded Encode(const compute::Done& m) {
  FlatBufferBuilder fbb(160);
  const auto& s = m.stats;
  auto stats = fbp::CreateRunStats(fbb, s.prompt_tokens, s.generated_tokens, s.prefill_seconds,
                                   s.seconds_per_token, s.position, s.scored_tokens, s.nll_sum, s.spec_drafted,
                                   s.spec_accepted, s.cached_tokens);
  auto msg = fbp::CreateDone(fbb, m.request_id, stats, static_cast<fbp::StopReason>(m.reason));
  fbp::FinishSizePrefixedEnvelopeBuffer(fbb, fbp::CreateEnvelope(fbb, fbp::Message::Done, msg.Union()));
  return Finish(fbb, Protocol::kCompute, fbp::Message::Done);
}
Encoded Encode(const compute::Cancel& m) {
  FlatBufferBuilder fbb(48);
  auto msg = fbp::CreateCancel(fbb, m.request_id);
  fbp::FinishSizePrefixedEnvelopeBuffer(fbb, fbp::CreateEnvelope(fbb, fbp::Message::Cancel, msg.Union()));
  return Finish(fbb, Protocol::kCompute, fbp::Message::Cancel);
}
Encoded Encode(const compute::Ping& m) {
  FlatBufferBuilder fbb(48);
  auto msg = fbp::CreatePing(fbb, m.nonce);
  fbp::FinishSizePrefixedEnvelopeBuffer(fbb, fbp::CreateEnvelope(fbb, fbp::Message::Ping, msg.Union()));
  return Finish(fbb, Protocol::kCompute, fbp::Message::Ping);
}
Encoded Encode(const compute::Pong& m) {
  FlatBufferBuilder fbb(48);
  auto msg = fbp::CreatePong(fbb, m.nonce);
  fbp::FinishSizePrefixedEnvelopeBuffer(fbb, fbp::CreateEnvelope(fbb, fbp::Message::Pong, msg.Union()));
  return Finish(fbb, Protocol::kCompute, fbp::Message::Pong);
}
Encoded Encode(const compute::StateOp& m) {
  FlatBufferBuilder fbb(64 + m.path.size() + m.extra.size());
  auto path = BytesVec(fbb, m.path);
  auto extra = BytesVec(fbb, m.extra);
  auto msg = fbp::CreateStateOp(fbb, m.request_id, static_cast<fbp::StateAction>(m.action), path, extra);
  fbp::FinishSizePrefixedEnvelopeBuffer(fbb, fbp::CreateEnvelope(fbb, fbp::Message::StateOp, msg.Union()));
  return Finish(fbb, Protocol::kCompute, fbp::Message::StateOp);
}
Encoded Encode(const compute::StateDone& m) {
  FlatBufferBuilder fbb(96 + m.error.size() + 4 * m.ids.size() + m.extra.size());
  auto error = fbb.CreateString(m.error);
  auto ids = fbb.CreateVector(m.ids);
  auto extra = BytesVec(fbb, m.extra);
  auto msg = fbp::CreateStateDone(fbb, m.request_id, m.ok, error, m.position, ids, extra);
  fbp::FinishSizePrefixedEnvelopeBuffer(fbb, fbp::CreateEnvelope(fbb, fbp::Message::StateDone, msg.Union()));
  return Finish(fbb, Protocol::kCompute, fbp::Message::StateDone);
}

Encoded Encode(const compute::Step& m) {
  FlatBufferBuilder fbb(96 + 8 * m.request_ids.size());
  auto ids = fbb.CreateVector(m.request_ids);
  auto msg = fbp::CreateStep(fbb, m.sequences, m.rows, m.prefill_rows, m.seconds, m.experts, m.trunk_bytes,
                             m.expert_bytes, ids);
  fbp::FinishSizePrefixedEnvelopeBuffer(fbb, fbp::CreateEnvelope(fbb, fbp::Message::Step, msg.Union()));
  return Finish(fbb, Protocol::kCompute, fbp::Message::Step);
}

Result<compute::Message> DecodeCompute(std::span<const uint8_t> kind, std::span<const uint8_t> payload) {
  using R = Result<compute::Message>;
  return DecodeWith<fbp::Envelope, compute::Message>(
      Protocol::kCompute, kMaxComputePayload, kind, payload,
      [](flatbuffers::Verifier& v) { return fbp::VerifySizePrefixedEnvelopeBuffer(v); },
      [](const fbp::Envelope* e) -> R {
        switch (e->message_type()) {
          case fbp::Message::Generate: {
            const auto* m = e->message_as_Generate();
            compute::Generate g;
            g.request_id = m->request_id();
            g.ids = Vec(m->ids());
            g.gen = m->gen();
            g.full_recompute = m->full_recompute();
            g.prefill_chunk = m->prefill_chunk();
            g.stop_ids = Vec(m->stop_ids());
            g.keep_state = m->keep_state();
            g.max_positions = m->max_positions();
            if (const auto* s = m->sampling()) {
              g.sampling = {s->temperature(), s->top_k(),          s->top_p(),
                            s->min_p(),       s->repeat_penalty(), s->repeat_last_n(),
                            s->presence_penalty(), s->frequency_penalty(), s->seed()};
            }
            g.logprobs = m->logprobs();
            g.perplexity = m->perplexity();
            g.spec = m->spec();
            g.snapshot_at = m->snapshot_at();
            g.cache_partition = m->cache_partition();
            if (const auto* c = m->constraint())
              g.constraint = compute::Constraint{c->schema() ? c->schema()->str() : std::string(), Vec(c->after())};
            return R::Ok(std::move(g));
          }
          case fbp::Message::Token: {
            const auto* m = e->message_as_Token();
            compute::Token t{m->request_id(), m->id(), m->index(), m->logprob(), {}};
            if (const auto* top = m->top())
              for (const auto* x : *top) t.top.push_back({x->id(), x->logprob()});
            return R::Ok(std::move(t));
          }
          case fbp::Message::Done: {
            const auto* m = e->message_as_Done();
            if (m->reason() > fbp::StopReason::MAX) return R::Fail("Done.reason out of range");
            compute::Done d{m->request_id(), {}, static_cast<compute::StopReason>(m->reason())};
            if (const auto* s = m->stats()) {
              d.stats = {s->prompt_tokens(), s->generated_tokens(), s->prefill_seconds(), s->seconds_per_token(),
                         s->position(),      s->scored_tokens(),    s->nll_sum(),         s->spec_drafted(),
                         s->spec_accepted(),  s->cached_tokens()};
            }
            return R::Ok(d);
          }
          case fbp::Message::Cancel:
            return R::Ok(compute::Cancel{e->message_as_Cancel()->request_id()});
          case fbp::Message::Ping:
            return R::Ok(compute::Ping{e->message_as_Ping()->nonce()});
          case fbp::Message::Pong:
            return R::Ok(compute::Pong{e->message_as_Pong()->nonce()});
          case fbp::Message::StateOp: {
            const auto* m = e->message_as_StateOp();
            if (m->action() > fbp::StateAction::MAX) return R::Fail("StateOp.action out of range");
            return R::Ok(compute::StateOp{m->request_id(), static_cast<compute::StateAction>(m->action()),
                                          Bytes(m->path()), Bytes(m->extra())});
          }
          case fbp::Message::StateDone: {
            const auto* m = e->message_as_StateDone();
            return R::Ok(compute::StateDone{m->request_id(), m->ok(), Str(m->error()), m->position(),
                                            Vec(m->ids()), Bytes(m->extra())});
          }
          case fbp::Message::Step: {
            const auto* m = e->message_as_Step();
            return R::Ok(compute::Step{m->sequences(), m->rows(), m->prefill_rows(), m->seconds(), m->experts(),
                                       m->trunk_bytes(), m->expert_bytes(), Vec(m->request_ids())});
          }
          default:
            return R::Fail("unknown compute message type");
        }
      });
}

// ============================== tokenizer ==============================

Encoded Encode(const tokenizer::Encode& m) {
  FlatBufferBuilder fbb(64 + m.text.size());
  auto text = BytesVec(fbb, m.text);
  auto msg = fbt::CreateEncode(fbb, m.request_id, text, m.allow_special);
  fbt::FinishSizePrefixedEnvelopeBuffer(fbb, fbt::CreateEnvelope(fbb, fbt::Message::Encode, msg.Union()));
  return Finish(fbb, Protocol::kTokenizer, fbt::Message::Encode);
}
Encoded Encode(const tokenizer::EncodedIds& m) {
  FlatBufferBuilder fbb(64 + 4 * m.ids.size());
  auto msg = fbt::CreateEncodedIdsDirect(fbb, m.request_id, &m.ids);
  fbt::FinishSizePrefixedEnvelopeBuffer(fbb, fbt::CreateEnvelope(fbb, fbt::Message::EncodedIds, msg.Union()));
  return Finish(fbb, Protocol::kTokenizer, fbt::Message::EncodedIds);
}
Encoded Encode(const tokenizer::Decode& m) {
  FlatBufferBuilder fbb(64 + 4 * m.ids.size());
  auto msg = fbt::CreateDecodeDirect(fbb, m.request_id, &m.ids, m.stream, m.final);
  fbt::FinishSizePrefixedEnvelopeBuffer(fbb, fbt::CreateEnvelope(fbb, fbt::Message::Decode, msg.Union()));
  return Finish(fbb, Protocol::kTokenizer, fbt::Message::Decode);
}
Encoded Encode(const tokenizer::Decoded& m) {
  FlatBufferBuilder fbb(64 + m.text.size());
  auto text = BytesVec(fbb, m.text);
  auto msg = fbt::CreateDecoded(fbb, m.request_id, text);
  fbt::FinishSizePrefixedEnvelopeBuffer(fbb, fbt::CreateEnvelope(fbb, fbt::Message::Decoded, msg.Union()));
  return Finish(fbb, Protocol::kTokenizer, fbt::Message::Decoded);
}
Encoded Encode(const tokenizer::RenderChat& m) {
  FlatBufferBuilder fbb(128 + m.history_jsonl.size() + m.tools_json.size());
  auto hist = BytesVec(fbb, m.history_jsonl);
  auto effort = fbb.CreateString(m.thinking_effort);
  auto tools = BytesVec(fbb, m.tools_json);
  auto forced = fbb.CreateString(m.forced_call);
  auto msg = fbt::CreateRenderChat(fbb, m.request_id, hist, m.thinking, effort, tools,
                                   static_cast<fbt::ToolChoice>(m.tool_choice), m.continue_final, forced);
  fbt::FinishSizePrefixedEnvelopeBuffer(fbb, fbt::CreateEnvelope(fbb, fbt::Message::RenderChat, msg.Union()));
  return Finish(fbb, Protocol::kTokenizer, fbt::Message::RenderChat);
}
Encoded Encode(const tokenizer::Failed& m) {
  FlatBufferBuilder fbb(128);
  auto msg = fbt::CreateFailedDirect(fbb, m.request_id, static_cast<fbt::Error>(m.error), m.detail.c_str());
  fbt::FinishSizePrefixedEnvelopeBuffer(fbb, fbt::CreateEnvelope(fbb, fbt::Message::Failed, msg.Union()));
  return Finish(fbb, Protocol::kTokenizer, fbt::Message::Failed);
}

Result<tokenizer::Message> DecodeTokenizer(std::span<const uint8_t> kind, std::span<const uint8_t> payload) {
  using R = Result<tokenizer::Message>;
  return DecodeWith<fbt::Envelope, tokenizer::Message>(
      Protocol::kTokenizer, kMaxTokenizerPayload, kind, payload,
      [](flatbuffers::Verifier& v) { return fbt::VerifySizePrefixedEnvelopeBuffer(v); },
      [](const fbt::Envelope* e) -> R {
        switch (e->message_type()) {
          case fbt::Message::Encode: {
            const auto* m = e->message_as_Encode();
            return R::Ok(tokenizer::Encode{m->request_id(), Bytes(m->text()), m->allow_special()});
          }
          case fbt::Message::EncodedIds: {
            const auto* m = e->message_as_EncodedIds();
            return R::Ok(tokenizer::EncodedIds{m->request_id(), Vec(m->ids())});
          }
          case fbt::Message::Decode: {
            const auto* m = e->message_as_Decode();
            return R::Ok(tokenizer::Decode{m->request_id(), Vec(m->ids()), m->stream(), m->final()});
          }
          case fbt::Message::Decoded: {
            const auto* m = e->message_as_Decoded();
            return R::Ok(tokenizer::Decoded{m->request_id(), Bytes(m->text())});
          }
          case fbt::Message::RenderChat: {
            const auto* m = e->message_as_RenderChat();
            if (m->tool_choice() > fbt::ToolChoice::MAX) return R::Fail("RenderChat.tool_choice out of range");
            return R::Ok(tokenizer::RenderChat{m->request_id(), Bytes(m->history_jsonl()), m->thinking(),
                                               Str(m->thinking_effort()), Bytes(m->tools_json()),
                                               static_cast<tokenizer::ToolChoice>(m->tool_choice()), m->continue_final(),
                                               Str(m->forced_call())});
          }
          case fbt::Message::Failed: {
            const auto* m = e->message_as_Failed();
            if (m->error() > fbt::Error::MAX) return R::Fail("Failed.error out of range");
            return R::Ok(tokenizer::Failed{m->request_id(), static_cast<tokenizer::Error>(m->error()),
                                           Str(m->detail())});
          }
          default:
            return R::Fail("unknown tokenizer message type");
        }
      });
}

}  // namespace k3::ipc
