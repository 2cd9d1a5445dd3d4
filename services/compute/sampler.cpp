#include "sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "generate.h"

namespace k3::compute {
namespace {

// SplitMix64's output function (Steele, Lea, Flood 2014): a bijection of 64-bit words whose
// output bits all depend on all input bits.
uint64_t Mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// NaN logits (a bug upstream) sort as -inf so the order stays total.
double Key(double v) { return std::isnan(v) ? -std::numeric_limits<double>::infinity() : v; }

bool PenaltiesOff(const SamplingParams& s) {
  return (s.repeat_penalty == 1.0f || s.repeat_last_n == 0) && s.presence_penalty == 0 && s.frequency_penalty == 0;
}

// Step 1 (docs/sampling.md): the penalised logits, in double. repeat_penalty once per distinct
// id among the last repeat_last_n ids of the sequence (prompt included); then presence/frequency
// per distinct id among this request's generated ids. Each id's value depends on that id alone: no order effects.
std::vector<double> Penalised(const float* logits, int64_t V, std::span<const int32_t> ids, int64_t generated,
                              const SamplingParams& s) {
  std::vector<double> z(static_cast<size_t>(V));
  for (int64_t i = 0; i < V; ++i) z[static_cast<size_t>(i)] = Key(logits[i]);
  const int64_t n = static_cast<int64_t>(ids.size());
  if (s.repeat_penalty != 1.0f && s.repeat_last_n != 0) {
    const int64_t w = s.repeat_last_n < 0 ? n : std::min<int64_t>(n, s.repeat_last_n);
    std::vector<int32_t> recent(ids.end() - w, ids.end());
    std::sort(recent.begin(), recent.end());
    recent.erase(std::unique(recent.begin(), recent.end()), recent.end());
    const double rp = s.repeat_penalty;
    for (int32_t id : recent) {
      if (id < 0 || id >= V) continue;
      double& v = z[static_cast<size_t>(id)];
      v = v > 0 ? v / rp : v * rp;
    }
  }
  if (s.presence_penalty != 0 || s.frequency_penalty != 0) {
    const int64_t g = std::clamp<int64_t>(generated, 0, n);
    std::vector<int32_t> gen(ids.end() - g, ids.end());
    std::sort(gen.begin(), gen.end());
    for (size_t a = 0; a < gen.size();) {
      size_t b = a;
      while (b < gen.size() && gen[b] == gen[a]) ++b;
      if (gen[a] >= 0 && gen[a] < V)
        z[static_cast<size_t>(gen[a])] -= static_cast<double>(b - a) * s.frequency_penalty + s.presence_penalty;
      a = b;
    }
  }
  return z;
}

}  // namespace

bool IsGreedy(const SamplingParams& s) { return s.temperature <= 0 && PenaltiesOff(s); }

double UniformAt(uint64_t seed, uint64_t position) {
  const uint64_t h = Mix64(Mix64(seed ^ 0x6a09e667f3bcc909ULL) + (position + 1) * 0x9e3779b97f4a7c15ULL);
  return static_cast<double>(h >> 11) * 0x1.0p-53;
}

int32_t SampleToken(const float* logits, int64_t V, std::span<const int32_t> ids, int64_t generated,
                    const SamplingParams& s) {
  if (s.temperature <= 0 && PenaltiesOff(s)) return Argmax(logits, V);  // greedy, as before sampling existed
  const std::vector<double> z = Penalised(logits, V, ids, generated, s);
  if (s.temperature <= 0) {  // Step 2: greedy over the penalised logits, ties to the lowest id
    int64_t best = 0;
    for (int64_t i = 1; i < V; ++i)
      if (z[static_cast<size_t>(i)] > z[static_cast<size_t>(best)]) best = i;
    return static_cast<int32_t>(best);
  }
  // Step 3: candidates by descending logit, ties by ascending id (a total order: any correct sort
  // gives the same sequence); top-k keeps the first k.
  struct Candidate {
    double z;
    int32_t id;
  };
  std::vector<Candidate> order(static_cast<size_t>(V));  // value next to id: a cache-friendly sort
  for (int64_t i = 0; i < V; ++i) order[static_cast<size_t>(i)] = {z[static_cast<size_t>(i)], static_cast<int32_t>(i)};
  auto before = [](const Candidate& a, const Candidate& b) { return a.z > b.z || (a.z == b.z && a.id < b.id); };
  if (s.top_k > 0 && s.top_k < V) {
    std::partial_sort(order.begin(), order.begin() + s.top_k, order.end(), before);
    order.resize(static_cast<size_t>(s.top_k));
  } else {
    std::sort(order.begin(), order.end(), before);
  }
  // Step 4: temperature, then unnormalised probabilities exp((z - zmax) / T) in that order.
  const double T = s.temperature, zmax = order[0].z;
  if (!std::isfinite(zmax)) return order[0].id;
  std::vector<double> p(order.size());
  double total = 0;
  for (size_t i = 0; i < order.size(); ++i) {
    p[i] = std::exp((order[i].z - zmax) / T);
    total += p[i];
  }
  size_t keep = order.size();
  // Step 5: top-p keeps the shortest prefix whose probability reaches top_p.
  if (s.top_p < 1.0f) {
    const double want = static_cast<double>(s.top_p) * total;
    double c = 0;
    for (size_t i = 0; i < keep; ++i) {
      c += p[i];
      if (c >= want) {
        keep = i + 1;
        break;
      }
    }
  }
  // Step 6: min-p drops the tail below min_p x the top probability (p[0] = 1 before normalising).
  if (s.min_p > 0) {
    const double floor = static_cast<double>(s.min_p) * p[0];
    size_t i = 1;
    while (i < keep && p[i] >= floor) ++i;
    keep = i;
  }
  // Step 7: one draw u in [0, 1) keyed by (seed, position) against the kept mass, in order.
  double kept = 0;
  for (size_t i = 0; i < keep; ++i) kept += p[i];
  const double target = UniformAt(s.seed, ids.size()) * kept;
  double c = 0;
  for (size_t i = 0; i < keep; ++i) {
    c += p[i];
    if (target < c) return order[i].id;
  }
  return order[keep - 1].id;  // rounding at the very top of the range
}

double LogSumExp(const float* logits, int64_t V) {
  double m = -std::numeric_limits<double>::infinity();
  for (int64_t i = 0; i < V; ++i) m = std::max(m, Key(logits[i]));
  if (!std::isfinite(m)) return m;
  double s = 0;
  for (int64_t i = 0; i < V; ++i) s += std::exp(Key(logits[i]) - m);
  return m + std::log(s);
}

Logprobs TokenLogprobs(const float* logits, int64_t V, int32_t chosen, int32_t n) {
  Logprobs out;
  const double lse = LogSumExp(logits, V);
  out.logprob = Key(logits[chosen]) - lse;
  const int64_t k = std::clamp<int64_t>(n, 0, V);
  if (k == 0) return out;
  std::vector<int32_t> order(static_cast<size_t>(V));
  for (int64_t i = 0; i < V; ++i) order[static_cast<size_t>(i)] = static_cast<int32_t>(i);
  std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t a, int32_t b) {
    const double la = Key(logits[a]), lb = Key(logits[b]);
    return la > lb || (la == lb && a < b);
  });
  for (int64_t i = 0; i < k; ++i) {
    const int32_t id = order[static_cast<size_t>(i)];
    out.top.emplace_back(id, Key(logits[id]) - lse);
  }
  return out;
}

void PromptScorer::Chunk(const float* logits, int64_t rows, int64_t V) {
  const int64_t n = static_cast<int64_t>(ids.size());
  for (int64_t t = 0; t < rows; ++t, ++next) {
    if (next + 1 >= n) continue;
    const int32_t want = ids[static_cast<size_t>(next + 1)];
    const float* row = logits + t * V;
    nll_sum += LogSumExp(row, V) - Key(row[want]);
    ++scored;
  }
}

}  // namespace k3::compute
