// In-process tests of the forward pass on the tiny checkpoint ($K3_TESTDATA/tiny, the
// generator's adversarial 13-layer model): chunked prefill == token by token, incremental
// decoding == full recompute, thread count and expert arrival order do not change a bit,
// the carried state matters, and binding rejects wrong dtypes / shapes naming the tensor.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <cmath>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/error.h"
#include "forward.h"
#include "mmap_source.h"
#include "tiny_checkpoint.h"

namespace k3::compute {
namespace {

class TinyModel : public TinyCheckpoint {
 protected:
  // Logits of every position of `ids`, fed in chunks of `chunk` from a fresh state.
  std::vector<float> AllLogits(const std::vector<int32_t>& ids, int64_t chunk,
                               ExpertSource* ex = nullptr) {
    Forward f(cfg_, globals_, *layers_, ex ? *ex : *experts_);
    const int64_t V = cfg_.vocab_size, n = static_cast<int64_t>(ids.size());
    std::vector<float> out(static_cast<size_t>(n * V));
    for (int64_t s = 0; s < n; s += chunk) {
      const int64_t T = std::min(chunk, n - s);
      f.Run(ids.data() + s, T, true, out.data() + s * V, nullptr);
    }
    EXPECT_EQ(f.position(), n);
    return out;
  }

  std::vector<int32_t> Prompt() const {
    std::vector<int32_t> ids;
    for (int i = 0; i < 12; ++i) ids.push_back(static_cast<int32_t>((i * 37 + 5) % cfg_.vocab_size));
    return ids;
  }
};

bool BitEqual(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST_F(TinyModel, ChunkedPrefillIsBitIdenticalToTokenByToken) {
  const auto ids = Prompt();
  const auto whole = AllLogits(ids, 64);
  EXPECT_TRUE(BitEqual(whole, AllLogits(ids, 1)));
  EXPECT_TRUE(BitEqual(whole, AllLogits(ids, 5)));
  for (float v : whole) ASSERT_TRUE(std::isfinite(v));
}

TEST_F(TinyModel, IncrementalDecodeEqualsFullRecompute) {
  auto ids = Prompt();
  Forward inc(cfg_, globals_, *layers_, *experts_);
  const int64_t V = cfg_.vocab_size;
  std::vector<float> li(static_cast<size_t>(V)), lf(static_cast<size_t>(V));
  inc.Run(ids.data(), static_cast<int64_t>(ids.size()), false, li.data(), nullptr);
  for (int step = 0; step < 4; ++step) {
    const int32_t next =
        static_cast<int32_t>(std::max_element(li.begin(), li.end()) - li.begin());
    ids.push_back(next);
    inc.Run(&next, 1, false, li.data(), nullptr);
    Forward full(cfg_, globals_, *layers_, *experts_);
    full.Run(ids.data(), static_cast<int64_t>(ids.size()), false, lf.data(), nullptr);
    ASSERT_TRUE(BitEqual(li, lf)) << "step " << step;
  }
}

TEST_F(TinyModel, CarriedStateChangesTheResult) {
  // The last token alone from a fresh state must differ from the same token after the
  // prefix: KDA S, conv windows and the MLA cache all carry information.
  const auto ids = Prompt();
  const auto all = AllLogits(ids, 64);
  const auto alone = AllLogits({ids.back()}, 1);
  const int64_t V = cfg_.vocab_size;
  const std::vector<float> last(all.end() - V, all.end());
  EXPECT_FALSE(BitEqual(last, alone));
  // And a reset really empties the state.
  Forward f(cfg_, globals_, *layers_, *experts_);
  std::vector<float> a(static_cast<size_t>(V)), b(static_cast<size_t>(V));
  f.Run(ids.data(), 3, false, a.data(), nullptr);
  f.Reset();
  EXPECT_EQ(f.position(), 0);
  f.Run(ids.data(), 3, false, b.data(), nullptr);
  EXPECT_TRUE(BitEqual(a, b));
}

TEST_F(TinyModel, ThreadCountDoesNotChangeBits) {
  const auto ids = Prompt();
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  const auto one = AllLogits(ids, 4);
  omp_set_num_threads(3);
  const auto three = AllLogits(ids, 4);
  omp_set_num_threads(saved);
  EXPECT_TRUE(BitEqual(one, three));
}

// Hands experts out in reverse request order, like a fetcher whose reads land out of order.
class ReversedExperts : public ExpertSource {
 public:
  explicit ReversedExperts(ExpertSource& inner) : inner_(inner) {}
  void Request(int64_t layer, const std::vector<int32_t>& e) override {
    inner_.Request(layer, e);
    order_.assign(e.rbegin(), e.rend());
    handed_ += static_cast<int64_t>(e.size());
  }
  int32_t NextReady(int64_t layer) override {
    inner_.NextReady(layer);  // keep the inner queue consistent
    const int32_t e = order_.front();
    order_.erase(order_.begin());
    return e;
  }
  ExpertWeights Acquire(int64_t l, int32_t e) override { return inner_.Acquire(l, e); }
  void Release(int64_t l, int32_t e) override { inner_.Release(l, e); }
  int64_t handed_ = 0;

 private:
  ExpertSource& inner_;
  std::vector<int32_t> order_;
};

TEST_F(TinyModel, ExpertArrivalOrderDoesNotChangeBits) {
  const auto ids = Prompt();
  ReversedExperts rev(*experts_);
  EXPECT_TRUE(BitEqual(AllLogits(ids, 6), AllLogits(ids, 6, &rev)));
  EXPECT_GT(rev.handed_, 0);
}

// A source that hands out an expert nobody asked for must be refused, not summed.
class WrongExperts : public ReversedExperts {
 public:
  using ReversedExperts::ReversedExperts;
  int32_t NextReady(int64_t layer) override {
    const int32_t e = ReversedExperts::NextReady(layer);
    return e == 0 ? 1 : 0;  // 0 and 1 cannot both be the requested one each time
  }
};

TEST_F(TinyModel, UnrequestedExpertIsRefused) {
  WrongExperts bad(*experts_);
  Forward f(cfg_, globals_, *layers_, bad);
  // Route a whole prompt: some layer requests neither 0 nor 1 first, or requests only one.
  const auto ids = Prompt();
  try {
    f.Run(ids.data(), 1, false, nullptr, nullptr);
    f.Run(ids.data() + 1, 11, false, nullptr, nullptr);
    FAIL() << "forward summed an expert that was not pending";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), kExitRuntime);
    EXPECT_NE(std::string(e.what()).find("not pending"), std::string::npos) << e.what();
  }
}

// Resolver that serves the tiny checkpoint but lies about one tensor's metadata.
struct Tampered {
  std::string name;
  TensorInfo info;
};

void ExpectBindError(const std::function<void()>& fn, const std::string& tensor) {
  try {
    fn();
    FAIL() << "binding accepted a bad " << tensor;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), kExitBadModel);
    EXPECT_NE(std::string(e.what()).find(tensor), std::string::npos) << e.what();
  }
}

TEST_F(TinyModel, BindingRejectsWrongDtypeNamingTheTensor) {
  const std::string name = "language_model.model.layers.1.self_attn.q_proj.weight";
  auto t = std::make_shared<Tampered>();
  t->name = name;
  const TensorResolver base = ck_->Resolver();
  TensorResolver bad = [base, t](const std::string& n) {
    RawTensor r = base(n);
    if (n == t->name) {
      t->info = *r.info;
      t->info.dtype = DType::I32;
      r.info = &t->info;
    }
    return r;
  };
  ExpectBindError([&] { BindLayer(cfg_, 1, bad); }, name);
}

TEST_F(TinyModel, BindingRejectsWrongShapeNamingTheTensor) {
  for (const std::string leaf :
       {"self_attn.o_norm.weight", "block_sparse_moe.gate.weight", "mlp_res_proj.weight"}) {
    const std::string name = "language_model.model.layers.2." + leaf;
    auto t = std::make_shared<Tampered>();
    t->name = name;
    const TensorResolver base = ck_->Resolver();
    TensorResolver bad = [base, t](const std::string& n) {
      RawTensor r = base(n);
      if (n == t->name) {
        t->info = *r.info;
        t->info.shape.back() += 1;
        r.info = &t->info;
      }
      return r;
    };
    ExpectBindError([&] { BindLayer(cfg_, 2, bad); }, name);
  }
  // Routed expert scales with the wrong width, and a float where U8 nibbles belong.
  const std::string sc = "language_model.model.layers.1.block_sparse_moe.experts.0.w2.weight_scale";
  auto t = std::make_shared<Tampered>();
  t->name = sc;
  const TensorResolver base = ck_->Resolver();
  TensorResolver bad = [base, t](const std::string& n) {
    RawTensor r = base(n);
    if (n == t->name) {
      t->info = *r.info;
      t->info.shape = {t->info.shape[0], t->info.shape[1] * 2};
      r.info = &t->info;
    }
    return r;
  };
  ExpectBindError([&] { BindExpert(cfg_, 1, 0, bad); }, sc);
}

TEST_F(TinyModel, MissingTensorIsABadModel) {
  const TensorResolver base = ck_->Resolver();
  const std::string gone = "language_model.model.layers.3.self_attn.kv_b_proj.weight";
  TensorResolver bad = [base, gone](const std::string& n) {
    if (n == gone) throw BadModel("tensor " + n + " not found");
    return base(n);
  };
  ExpectBindError([&] { BindLayer(cfg_, 3, bad); }, gone);
}

// Batching (Forward::RunBatch): three sequences with staggered starts, a prompt chunk beside
// decode tokens beside another prompt, logits of every row or of the last: each sequence's
// logits and final state are bit-identical to the same chunks run alone (at another thread
// count), and two sequences never see each other's state.
struct BatchSeq {
  std::vector<int32_t> ids;
  std::vector<int64_t> chunks;  // the rows it feeds at each of its steps
  int64_t start = 0;            // the batch step of its first chunk
  bool all_positions = false;
};

std::vector<BatchSeq> BatchSchedule(int64_t V) {
  auto ids = [V](int n, int mul, int add) {
    std::vector<int32_t> v;
    for (int i = 0; i < n; ++i) v.push_back(static_cast<int32_t>((i * mul + add) % V));
    return v;
  };
  return {{ids(10, 37, 5), {4, 1, 1, 1, 1, 1, 1}, 0, false},
          {ids(8, 11, 3), {1, 1, 1, 1, 1, 1, 1, 1}, 1, true},
          {ids(12, 29, 7), {6, 5, 1}, 2, true},
          {ids(10, 37, 5), {3, 3, 3, 1}, 3, false}};  // the first one's ids: same logits, own state
}

int64_t Rows(const BatchSeq& s, size_t k) { return s.all_positions ? s.chunks[k] : 1; }

bool StatesEqual(const SequenceState& a, const SequenceState& b) {
  auto eq = [](const std::vector<float>& x, const std::vector<float>& y) {
    // an empty vector's data() may be null, which memcmp must not see (UBSan)
    return x.size() == y.size() && (x.empty() || std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0);
  };
  if (a.position != b.position) return false;
  for (size_t l = 0; l < a.kda.size(); ++l)
    if (!eq(a.kda[l].S, b.kda[l].S) || !eq(a.kda[l].conv_q, b.kda[l].conv_q) || !eq(a.kda[l].conv_k, b.kda[l].conv_k) ||
        !eq(a.kda[l].conv_v, b.kda[l].conv_v))
      return false;
  for (size_t l = 0; l < a.mla.size(); ++l)
    if (a.mla[l].len != b.mla[l].len || !eq(a.mla[l].c, b.mla[l].c) || !eq(a.mla[l].kpe, b.mla[l].kpe)) return false;
  return true;
}

TEST_F(TinyModel, BatchedPassIsBitIdenticalToEachSequenceAlone) {
  const int64_t V = cfg_.vocab_size;
  const auto seqs = BatchSchedule(V);
  const int saved = omp_get_max_threads();
  // Alone, one thread: logits of every step, and the final state.
  omp_set_num_threads(1);
  std::vector<std::vector<std::vector<float>>> solo(seqs.size());
  std::vector<SequenceState> solo_state;
  for (const BatchSeq& s : seqs) {
    Forward f(cfg_, globals_, *layers_, *experts_);
    int64_t at = 0;
    auto& out = solo[solo_state.size()];
    for (size_t k = 0; k < s.chunks.size(); ++k) {
      out.emplace_back(static_cast<size_t>(Rows(s, k) * V));
      f.Run(s.ids.data() + at, s.chunks[k], s.all_positions, out.back().data(), nullptr);
      at += s.chunks[k];
    }
    solo_state.push_back(f.state());
  }
  // Batched, three threads: each step feeds the next chunk of every sequence that has one.
  omp_set_num_threads(3);
  Forward f(cfg_, globals_, *layers_, *experts_);
  std::vector<SequenceState> state(seqs.size());
  for (SequenceState& st : state) st.Reset(cfg_);
  std::vector<int64_t> at(seqs.size(), 0);
  int64_t max_batch = 0;
  for (int64_t step = 0; step < 12; ++step) {
    std::vector<Segment> segs;
    std::vector<std::pair<size_t, size_t>> who;  // (sequence, chunk)
    std::vector<std::vector<float>> logits(seqs.size());
    for (size_t i = 0; i < seqs.size(); ++i) {
      const int64_t k = step - seqs[i].start;
      if (k < 0 || k >= static_cast<int64_t>(seqs[i].chunks.size())) continue;
      logits[i].resize(static_cast<size_t>(Rows(seqs[i], static_cast<size_t>(k)) * V));
      segs.push_back({&state[i], seqs[i].ids.data() + at[i], seqs[i].chunks[static_cast<size_t>(k)],
                      seqs[i].all_positions, logits[i].data()});
      who.push_back({i, static_cast<size_t>(k)});
      at[i] += seqs[i].chunks[static_cast<size_t>(k)];
    }
    if (segs.empty()) continue;
    max_batch = std::max<int64_t>(max_batch, static_cast<int64_t>(segs.size()));
    f.RunBatch(segs);
    for (const auto& [i, k] : who)
      EXPECT_TRUE(BitEqual(logits[i], solo[i][k])) << "sequence " << i << " step " << step << " chunk " << k;
  }
  omp_set_num_threads(saved);
  EXPECT_GE(max_batch, 3);
  for (size_t i = 0; i < seqs.size(); ++i) EXPECT_TRUE(StatesEqual(state[i], solo_state[i])) << "sequence " << i;
  // Sequences 0 and 3 fed the same ids in other chunks: the same logits at the end (own states).
  EXPECT_TRUE(BitEqual(solo[0].back(), solo[3].back()));
  // The forward's own state was not touched.
  EXPECT_EQ(f.position(), 0);
  EXPECT_GT(f.pass_experts().size(), 0u);
}

TEST_F(TinyModel, BatchRefusesSharedOrOwnState) {
  Forward f(cfg_, globals_, *layers_, *experts_);
  SequenceState s;
  s.Reset(cfg_);
  const int32_t id = 1;
  EXPECT_THROW(f.RunBatch({{&s, &id, 1, false, nullptr}, {&s, &id, 1, false, nullptr}}), Error);
  EXPECT_THROW(f.RunBatch({{const_cast<SequenceState*>(&f.state()), &id, 1, false, nullptr}}), Error);
  EXPECT_EQ(s.position, 0);
}

}  // namespace
}  // namespace k3::compute
