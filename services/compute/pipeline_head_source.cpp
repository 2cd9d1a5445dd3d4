// PipelineLayerSource as a HeadSource: embedding rows and lm_head logits, either from the
// resident globals or streamed by the trunk reader (docs/pipeline.md "Streamed embedding and
// lm_head"). Streaming never changes a value: a row is the same bytes converted by the same
// kern::RowToFloat, and each logit is the same kern::Matmul dot product whatever row range
// the chunk covers (determinism contract, kernels/matmul.h).
#include <algorithm>
#include <cstring>

#include "common/error.h"
#include "common/row_tile.h"
#include "common/ipc/protocol.h"
#include "common/plan/head_stream.h"
#include "pipeline_sources.h"

namespace k3::compute {
namespace {

using Clock = std::chrono::steady_clock;

int64_t RowBytes(const kern::DenseMat& m) { return (m.format == kern::WFormat::F32 ? 4 : 2) * m.cols; }

}  // namespace

void PipelineLayerSource::Embed(const int32_t* ids, int64_t T, float* out) {
  const int64_t H = cfg_.hidden_size;
  if (!stream_.embed_window) {
    for (int64_t t = 0; t < T; ++t) kern::RowToFloat(embed_, ids[t], out + t * H);
    return;
  }
  const int64_t stride = plan::EmbedRowStride(RowBytes(embed_));
  const int64_t capacity = static_cast<int64_t>(stream_.embed_window->size()) / stride;
  if (capacity < 1) throw RuntimeFailure("embed window smaller than one embedding row");
  for (int64_t s = 0; s < T; s += capacity) EmbedBatch(ids + s, std::min(capacity, T - s), out + s * H);
}

void PipelineLayerSource::EmbedBatch(const int32_t* ids, int64_t n, float* out) {
  const ipc::weights::EmbedRows req{next_embed_request_++, std::vector<int32_t>(ids, ids + n)};
  const auto t0 = Clock::now();
  embed_reply_.reset();
  // Idempotent: re-sent after the resend timeout (a restarted reader answers the copy).
  while (!embed_reply_ || embed_reply_->request_id != req.request_id) {
    ipc::SendMessage(sock_, ipc::Encode(req));
    const auto deadline = Clock::now() + resend_;
    while (Clock::now() < deadline) {
      auto msg = ipc::ReceiveVerified(sock_, false, ipc::DecodeWeights, WaitSlice(stop_, deadline), c_.rejects);
      if (!msg) continue;
      Handle(msg->message);
      if (embed_reply_ && embed_reply_->request_id == req.request_id) break;
    }
  }
  c_.trunk_wait_seconds += std::chrono::duration<double>(Clock::now() - t0).count();
  const ipc::weights::EmbedRowsReady& r = *embed_reply_;
  const uint64_t row = static_cast<uint64_t>(RowBytes(embed_));
  const uint64_t size = stream_.embed_window->size();
  if (r.offsets.size() != static_cast<size_t>(n) || r.row_bytes != row)
    throw RuntimeFailure("trunk reader: EmbedRowsReady does not match the request");
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t off = r.offsets[static_cast<size_t>(i)];
    if (off > size || row > size - off) throw RuntimeFailure("trunk reader: embedding row announced outside the window");
    const kern::DenseMat one{stream_.embed_window->data() + off, embed_.format, 1, embed_.cols};
    kern::RowToFloat(one, 0, out + i * cfg_.hidden_size);
  }
}

void PipelineLayerSource::Logits(const float* X, int64_t T, float* Y) {
  if (!stream_.lm_head) {
    kern::Matmul(lm_head_, X, T, Y);
    return;
  }
  const int64_t V = cfg_.vocab_size, H = cfg_.hidden_size;
  const uint64_t row = static_cast<uint64_t>(RowBytes(lm_head_));
  for (int64_t c = 0; c < lm_chunks_; ++c) {
    const auto layer = static_cast<int32_t>(cfg_.num_layers + 1 + c);
    const int64_t r0 = c * lm_chunk_rows_, n = std::min(V, r0 + lm_chunk_rows_) - r0;
    for (;;) {
      const ipc::weights::LayerReady r = WaitFor(layer);
      if (r.slot < 0 || r.length != static_cast<uint64_t>(n) * row)
        throw RuntimeFailure("trunk reader: lm_head chunk " + std::to_string(c) + " announced with " +
                             std::to_string(r.length) + " bytes, expected " + std::to_string(n * row));
      const auto span = ring_.Read({static_cast<uint32_t>(r.slot), r.generation});
      if (!span.empty()) {
        if (r.offset > span.size() || r.length > span.size() - r.offset)
          throw RuntimeFailure("trunk reader: lm_head chunk announced outside its slot");
        const kern::DenseMat view{span.data() + r.offset, lm_head_.format, n, H};
        if (T == 1) {
          kern::Matmul(view, X, 1, Y + r0);
        } else {  // Matmul writes [rows][n]; scatter into [T][V], kRowTile rows at a time
          for (int64_t t0 = 0; t0 < T; t0 += kRowTile) {
            const int64_t m = std::min(kRowTile, T - t0);
            chunk_out_.resize(static_cast<size_t>(m * n));
            kern::Matmul(view, X + t0 * H, m, chunk_out_.data());
            for (int64_t t = 0; t < m; ++t)
              std::memcpy(Y + (t0 + t) * V + r0, chunk_out_.data() + t * n, static_cast<size_t>(n) * sizeof(float));
          }
        }
      }
      if (span.empty() || !Usable(r)) {  // refilled while in use (reader restart): do it again
        ++c_.stale_refs;
        ready_.erase({layer, 0});
        continue;
      }
      c_.trunk_streamed_bytes += r.length;
      ipc::SendMessage(sock_, ipc::Encode(ipc::weights::LayerDone{r.layer, r.slot, r.generation}));
      ready_.erase({layer, 0});
      break;
    }
  }
}

}  // namespace k3::compute
