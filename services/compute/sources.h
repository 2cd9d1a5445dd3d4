// How the forward pass gets its weights. The standalone mode implements both interfaces by
// mmap of the shards; the pipeline will implement them over the trunk reader's and expert
// fetcher's shared memory. Experts may become ready in any order: the MoE asks NextReady()
// and keeps results per (token, rank), so the sum order never depends on arrival order.
#pragma once
#include <cstdint>
#include <vector>

#include "weights.h"

namespace k3::compute {

// Thrown at a safe point (between layers, or while a source waits for weights) when the run
// was asked to stop; RunGreedy catches it and ends the request with what it has (generate.h).
struct StopAtSafePoint {};

class LayerSource {
 public:
  virtual ~LayerSource() = default;
  // Blocks until layer `layer`'s trunk tensors are available; valid until Release(layer).
  virtual const LayerWeights& Acquire(int64_t layer) = 0;
  virtual void Release(int64_t layer) = 0;
  // Layer `layer`'s tensors if they are already available, without blocking or taking the
  // layer (null otherwise); valid until the next Peek, Acquire or Release. Only for guesses
  // (next-layer expert hints), never for the forward pass itself.
  virtual const LayerWeights* Peek(int64_t /*layer*/) { return nullptr; }
  // A layer that arrives in pieces (docs/trunk-pieces.md) is bound by Acquire with its small
  // tensors widened and its matrices as shapes (TrunkRef set); the mixers and FFN then take
  // each matrix through these, in the layer's use order (common/plan/trunk_pieces.h
  // LayerUseOrder), and Release ends the layer. Y = W · X, Y [T][W.rows]; bit-identical to
  // kern::Matmul on the whole matrix (row blocks are independent outputs).
  virtual void Apply(int64_t /*layer*/, TensorRole /*role*/, const kern::DenseMat& W, const float* X, int64_t T,
                     float* Y) {
    kern::Matmul(W, X, T, Y);
  }
  // An atomic matrix whole (MLA's kv_b), valid until the next Apply, Whole or Release.
  virtual kern::DenseMat Whole(int64_t /*layer*/, TensorRole /*role*/, const kern::DenseMat& W) { return W; }
};

// The mixers' and FFN's matrix product on a trunk matrix: through the source when the layer
// arrives in pieces, else kern::Matmul on the bound view.
inline void TrunkMatmul(const TrunkRef& t, TensorRole role, const kern::DenseMat& W, const float* X, int64_t T,
                        float* Y) {
  if (t.src) t.src->Apply(t.layer, role, W, X, T, Y);
  else kern::Matmul(W, X, T, Y);
}
inline kern::DenseMat TrunkWhole(const TrunkRef& t, TensorRole role, const kern::DenseMat& W) {
  return t.src ? t.src->Whole(t.layer, role, W) : W;
}

// Embedding rows and lm_head logits, when they are not plain views of resident tensors (the
// pipeline streams them: docs/pipeline.md "Streamed embedding and lm_head"). Results must be
// bit-identical to kern::RowToFloat / kern::Matmul on the resident tensors.
class HeadSource {
 public:
  virtual ~HeadSource() = default;
  // out[t*H, (t+1)*H) = the float embedding row of ids[t], t < T.
  virtual void Embed(const int32_t* ids, int64_t T, float* out) = 0;
  // Y[t*vocab + r] = lm_head row r · X[t*H ...], t < T.
  virtual void Logits(const float* X, int64_t T, float* Y) = 0;
};

class ExpertSource {
 public:
  virtual ~ExpertSource() = default;
  // Announces the distinct experts the current chunk needs in layer `layer`.
  virtual void Request(int64_t layer, const std::vector<int32_t>& experts) = 0;
  // Returns one requested expert that is ready and not yet handed out (blocks if none is).
  virtual int32_t NextReady(int64_t layer) = 0;
  // The expert's MXFP4 views; valid until Release(layer, expert).
  virtual ExpertWeights Acquire(int64_t layer, int32_t expert) = 0;
  virtual void Release(int64_t layer, int32_t expert) = 0;
  // A guess at the experts a later layer will request (best first): a source that reads may
  // start on them while nothing is demanded. Never changes what NextReady returns.
  virtual void Hint(int64_t /*layer*/, const std::vector<int32_t>& /*experts*/) {}
};

}  // namespace k3::compute
