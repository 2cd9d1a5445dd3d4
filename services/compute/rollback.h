// What a speculative verify pass records so that the sequence state can afterwards keep only
// the first `keep` of its T tokens (docs/pipeline.md, "Speculative decoding"). Held by Forward
// next to the SequenceState, never part of it.
//
// Why a journal and not a re-run: restoring a snapshot and feeding the accepted tokens again
// would read every trunk layer a second time (seconds per token when weights stream). The
// recurrence inputs of the pass are already computed, so the KDA state is rebuilt from the
// snapshot by replaying KdaStep on them (the same calls with the same inputs: the same bits),
// and the conv windows from the recorded pre-conv inputs. Per-position copies of S would need
// T full states (T x heads x D x D per layer); the journal needs one state plus
// (7 x proj + heads) floats per token. MLA rows are appended, so the cache only needs its length.
#pragma once
#include <cstdint>
#include <vector>

namespace k3::compute {

struct KdaJournal {
  bool recorded = false;          // this layer ran in the verify pass (a stop can end it early)
  int64_t T = 0;                  // tokens of the pass
  std::vector<float> S0;          // the recurrent state before the pass
  std::vector<float> conv0;       // conv_q, conv_k, conv_v windows before the pass, concatenated
  std::vector<float> pre;         // [3][T][proj] pre-conv q, k, v of the pass
  std::vector<float> q, k, v, a;  // [T][proj] the recurrence inputs (q, k normalised; a = α)
  std::vector<float> beta;        // [T][heads]

  int64_t bytes() const {
    return static_cast<int64_t>(4 * (S0.size() + conv0.size() + pre.size() + q.size() + k.size() +
                                     v.size() + a.size() + beta.size()));
  }
};

struct VerifyJournal {
  bool open = false;              // between Forward::BeginVerify and Forward::KeepFirst
  int64_t position = 0;           // SequenceState::position before the pass
  int64_t T = 0;                  // tokens of the pass (0 until it completes)
  std::vector<KdaJournal> kda;    // indexed by layer
  std::vector<int64_t> mla_len;   // MlaCache::len before the pass, by layer
};

}  // namespace k3::compute
