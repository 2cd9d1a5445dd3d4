// What compute holds for its sequences, as functions of the model config and the options:
// the floor's one sequence (KDA state, MLA cache, scratch) and what batching, speculation and
// the prefix cache add. docs/memory-plan.md "Regions" gives each formula.
#pragma once
#include <cstdint>

#include "common/model_config.h"
#include "common/option_limits.h"

namespace k3::plan {

// --spec: the most drafts one verify pass takes.
constexpr int64_t kMaxSpecDrafts = 16;

// --max-batch: the most sequences one forward pass decodes together (common/option_limits.h).
inline constexpr int64_t kMaxBatch = limits::kMaxBatch;

// One sequence's recurrent state: per KDA layer one fp32 [head_dim x head_dim] state per head
// plus the q/k/v conv windows (K-1 inputs).
int64_t KdaStateBytes(const ModelConfig& cfg);

// One sequence's MLA cache: per MLA layer the compressed latent (normed c + shared k_pe) of
// every position of the context, fp32.
int64_t MlaCacheBytes(const ModelConfig& cfg, int64_t context);

// Compute's scratch, fp32: per row of a pass (a prompt-chunk token; a verify pass of
// `spec_drafts` runs drafts + 1 rows, like a chunk) the residual stream, the AttnRes block
// snapshots and the largest layer's own buffers (ScratchRowBytes), plus buffers of a fixed
// size: the matmul and expert tiles (common/row_tile.h), MLA's per-thread attention scores over
// the context, one logits row. `prompt_logits` (perplexity): every prompt row's logits too.
int64_t ScratchBytes(const ModelConfig& cfg, int64_t context, int64_t prefill_chunk, int64_t spec_drafts,
                     bool prompt_logits = false);
// The part of ScratchBytes that grows with each row of the chunk.
int64_t ScratchRowBytes(const ModelConfig& cfg, bool prompt_logits = false);

// What compute holds beyond the floor's one sequence to decode `max_batch` together (0 for 1):
// per extra sequence its KDA state and MLA cache for the whole context, and the scratch of
// its decode row (its activations, attention scores over the context, a logits row).
int64_t BatchStateBytes(const ModelConfig& cfg, int64_t context, int64_t max_batch);

// What compute holds to roll back a verify pass of `drafts` drafts (0 for 0; rollback.h): per
// KDA layer the state before the pass (recurrent state + conv windows) and per position of the
// pass its pre-conv q/k/v, recurrence inputs q/k/v/α and β, plus the pass's logits rows. MLA
// needs only a length.
int64_t SpecRollbackBytes(const ModelConfig& cfg, int64_t drafts);

// Bytes one prefix-cache snapshot of a sequence of `positions` ids holds (compute's
// PrefixCache counts exactly this): the ids, every KDA layer's recurrent state and conv
// windows, and every MLA layer's latent rows (normed c + k_pe) of those positions, fp32.
int64_t PrefixSnapshotBytes(const ModelConfig& cfg, int64_t positions);

// prefix_cache = auto: room for two snapshots of a full-context sequence (a shared system
// prompt and a chat's previous turn), but never more than a quarter of what the budget leaves
// above the floor (`headroom`), so the floor is unchanged and the expert slots keep most of the
// rest. 0 at the floor.
int64_t PrefixCacheAutoBytes(const ModelConfig& cfg, int64_t context, int64_t headroom);

}  // namespace k3::plan
