// Cost of structured output per generated token (docs/sampling.md "Constrained output"): the
// token mask of a 50-property schema at K3's vocabulary size (163,840 ids) next to the sampler's
// own cost, both measured here on the same logits.
//
//   k3-bench-structured --vocab DIR [--properties 50] [--repeats 5] [--seed 1]
//
// Run twice in one invocation: the baseline with every mask a walk of the whole trie (string
// states too, as before the shared string interior), then the masks as k3 computes them.
//
// DIR is a tokenizer directory (tiktoken.model); its first 163,584 ranks are the text ids and
// the remaining 256 ids up to 163,840 are special (K3's layout). Each repeat generates one JSON
// value from random logits (ids whose bytes hold a JSON delimiter get +3, so values end in a
// few hundred tokens) with a fresh compiled schema (cold: no cached mask) and then the same
// ids again on the warm cache; temperature 1 without top_k (the sampler's full sort). Prints
// medians over the repeats of the per-token means, the median and worst single token over all
// repeats (cold and warm, the sampler's alike), the slowest cold masks with their kind (a state
// inside a string or not), and the ratio mask / sampler. The trie's shared string-interior
// mask is computed once when the trie is built (timed on its own line).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "common/json_constraint/constraint.h"
#include "common/median.h"
#include "services/compute/sampler.h"
#include "services/tokenizer/vocab.h"

namespace jc = k3::json_constraint;
using Clock = std::chrono::steady_clock;

namespace {

std::string Schema(int n) {
  std::string props, required;
  for (int i = 0; i < n; ++i) {
    const std::string name = "field_" + std::to_string(i);
    static const char* kinds[] = {R"({"type":"string"})", R"({"type":"integer"})", R"({"enum":["red","green","blue"]})",
                                  R"({"type":"boolean"})", R"({"type":"array","items":{"type":"string"},"maxItems":3})",
                                  R"({"type":["number","null"]})"};
    props += (i ? "," : "") + ("\"" + name + "\":") + kinds[i % 6];
    required += (i ? "," : "") + ("\"" + name + "\"");
  }
  return R"({"type":"object","properties":{)" + props + "},\"required\":[" + required + "],\"additionalProperties\":false}";
}

double Ms(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double, std::milli>(b - a).count(); }

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("per-token cost of the structured-output mask against the sampler");
  std::string dir;
  int properties = 50, repeats = 5;
  uint64_t seed = 1;
  app.add_option("--vocab", dir, "tokenizer directory (tiktoken.model)")->required();
  app.add_option("--properties", properties, "properties of the schema");
  app.add_option("--repeats", repeats, "values generated (medians over them)");
  app.add_option("--seed", seed, "seed of the logits and the draws");
  CLI11_PARSE(app, argc, argv);

  constexpr int64_t kVocab = 163840, kRanks = 163584;
  const k3::tok::Vocab v = k3::tok::Vocab::Load(dir);
  std::vector<std::string> tokens(kVocab);
  for (uint32_t id = 0; id < std::min<uint32_t>(v.num_ranks(), kRanks); ++id) {
    std::string_view b;
    if (v.IdBytes(id, &b)) tokens[id] = std::string(b);
  }
  std::vector<float> boost(kVocab, 0.0f);
  for (int64_t id = 0; id < kVocab; ++id)
    if (tokens[static_cast<size_t>(id)].find_first_of("\",:}]0123456789") != std::string::npos) boost[static_cast<size_t>(id)] = 3.0f;
  const auto t_trie = Clock::now();
  const jc::TokenTrie trie(tokens);
  const auto t_warm = Clock::now();
  jc::WarmStringInterior(trie);
  const auto t_done = Clock::now();
  std::printf("vocabulary: %lld ids (%lld text ids from %s), trie %zu nodes built in %.0f ms, string interior in %.1f ms\n",
              (long long)kVocab, (long long)kRanks, dir.c_str(), trie.nodes(), Ms(t_trie, t_warm), Ms(t_warm, t_done));
  const std::string schema = Schema(properties);
  const int32_t end_id = static_cast<int32_t>(kRanks + 1);  // [EOS] in K3's layout

  for (const bool split : {false, true}) {
    std::printf("== %s\n", split ? "k3: string states from the shared interior mask" : "baseline: every mask a whole-trie walk");
    std::vector<double> cold_mask, warm_mask, sampler, tokens_per_value, misses;
    std::vector<double> cold_each, warm_each, sampler_each;  // every token of every repeat
    struct Slow {
      double ms;
      bool in_string, computed;
    };
    std::vector<Slow> slow;
    for (int r = 0; r < repeats; ++r) {
      auto compiled = std::make_shared<jc::Compiled>(jc::CompileSchemaText(schema), trie);
      compiled->masker.set_string_split(split);
      std::mt19937_64 rng(seed + static_cast<uint64_t>(r));
      std::normal_distribution<float> normal(0.0f, 2.0f);
      k3::compute::SamplingParams s;
      s.temperature = 1.0f;
      s.seed = seed + static_cast<uint64_t>(r);
      std::vector<int32_t> ids = {1, 2, 3}, generated;
      std::vector<float> logits(kVocab), masked;
      double mask_ms = 0, sample_ms = 0;
      jc::Constrained c(compiled, trie, {end_id});
      jc::Matcher probe(jc::CompileSchemaText(schema));  // the state's kind, for the slowest masks
      jc::State state = probe.Start(), tmp;
      while (!c.Finished(generated) && generated.size() < 4000) {
        for (int64_t i = 0; i < kVocab; ++i) logits[static_cast<size_t>(i)] = normal(rng) + boost[static_cast<size_t>(i)];
        const int64_t misses_before = compiled->masker.misses();
        const auto t0 = Clock::now();
        c.Mask(logits.data(), kVocab, generated, masked);
        const auto t1 = Clock::now();
        slow.push_back({Ms(t0, t1), probe.InPlainString(state), compiled->masker.misses() > misses_before});
        const int32_t id = k3::compute::SampleToken(masked.data(), kVocab, ids, static_cast<int64_t>(generated.size()), s);
        const auto t2 = Clock::now();
        mask_ms += Ms(t0, t1);
        sample_ms += Ms(t1, t2);
        cold_each.push_back(Ms(t0, t1));
        sampler_each.push_back(Ms(t1, t2));
        generated.push_back(id);
        if (id != end_id)
          for (char ch : tokens[static_cast<size_t>(id)])
            if (probe.Feed(state, static_cast<uint8_t>(ch), tmp)) std::swap(state, tmp);
        ids.push_back(id);
      }
      const double n = static_cast<double>(generated.size());
      cold_mask.push_back(mask_ms / n);
      sampler.push_back(sample_ms / n);
      tokens_per_value.push_back(n);
      misses.push_back(static_cast<double>(compiled->masker.misses()));
      // The same ids again: every state's mask is cached now.
      jc::Constrained again(compiled, trie, {end_id});
      std::vector<int32_t> prefix;
      double warm_ms = 0;
      for (int32_t id : generated) {
        const auto t0 = Clock::now();
        again.Mask(logits.data(), kVocab, prefix, masked);
        warm_ms += Ms(t0, Clock::now());
        warm_each.push_back(Ms(t0, Clock::now()));
        prefix.push_back(id);
      }
      warm_mask.push_back(warm_ms / n);
      std::string text;
      for (int32_t id : generated)
        if (id != end_id) text += tokens[static_cast<size_t>(id)];
      if (r == 0 && !split) std::printf("first value (%zu tokens, %zu bytes): %.160s...\n", generated.size(), text.size(), text.c_str());
    }
    const double cm = k3::Median(cold_mask), wm = k3::Median(warm_mask), sm = k3::Median(sampler);
    std::printf("schema: %d properties; %d values, median %.0f tokens each, median %.0f masks computed (the rest cached)\n",
                properties, repeats, k3::Median(tokens_per_value), k3::Median(misses));
    auto worst = [](const std::vector<double>& xs) { return *std::max_element(xs.begin(), xs.end()); };
    std::printf("mask, cold cache:  %.3f ms/token mean; single token median %.3f, worst %.2f ms\n", cm, k3::Median(cold_each),
                worst(cold_each));
    std::printf("mask, warm cache:  %.3f ms/token mean; single token median %.3f, worst %.2f ms\n", wm, k3::Median(warm_each),
                worst(warm_each));
    std::printf("sampler (baseline): %.3f ms/token mean; single token median %.3f, worst %.2f ms (temperature 1, no top_k)\n",
                sm, k3::Median(sampler_each), worst(sampler_each));
    std::sort(slow.begin(), slow.end(), [](const Slow& a, const Slow& b) { return a.ms > b.ms; });
    double slowest_computed = 0;
    for (const Slow& x : slow)
      if (x.computed && x.in_string) slowest_computed = std::max(slowest_computed, x.ms);
    for (const bool in_string : {true, false}) {  // medians and sums: robust against a preempted token, unlike the worst
      std::vector<double> computed;
      for (const Slow& x : slow)
        if (x.computed && x.in_string == in_string) computed.push_back(x.ms);
      double sum = 0;
      for (double x : computed) sum += x;
      std::printf("computed masks %s: %zu, median %.3f ms, sum %.1f ms%s\n", in_string ? "of string states" : "of other states",
                  computed.size(), k3::Median(computed), sum,
                  in_string ? (", slowest " + std::to_string(slowest_computed) + " ms").c_str() : "");
    }
    std::printf("slowest cold masks:");
    for (size_t i = 0; i < std::min<size_t>(5, slow.size()); ++i)
      std::printf(" %.2f ms (%s, %s)", slow[i].ms, slow[i].in_string ? "in a string" : "not in a string",
                  slow[i].computed ? "computed" : "cached");
    std::printf("\n");
    std::printf("ratio mask/sampler: cold %.2f, warm %.2f\n", cm / sm, wm / sm);
  }
  return 0;
}
