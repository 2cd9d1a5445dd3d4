#include "constraints.h"

#include "common/error.h"
#include "services/tokenizer/vocab.h"

namespace k3::compute {

namespace jc = json_constraint;

std::shared_ptr<jc::Constrained> ConstraintLibrary::For(const ipc::compute::Constraint& c) {
  if (dir_.empty()) throw BadInput("Generate.constraint needs k3-compute --tokenizer (the vocabulary's bytes)");
  if (c.after.empty()) throw BadInput("Generate.constraint.after is empty (it must end with a stop id)");
  for (int32_t id : c.after)
    if (id < 0 || id >= vocab_) throw BadInput("Generate.constraint.after id " + std::to_string(id) + " outside the vocabulary");
  if (!trie_) {  // ranks only: added (special) tokens are never part of a JSON value
    const tok::Vocab v = tok::Vocab::Load(dir_);
    std::vector<std::string> tokens(static_cast<size_t>(vocab_));
    for (uint32_t id = 0; id < v.num_ranks() && id < tokens.size(); ++id) {
      std::string_view bytes;
      if (v.IdBytes(id, &bytes)) tokens[id] = std::string(bytes);
    }
    trie_ = std::make_unique<jc::TokenTrie>(std::move(tokens));
    jc::WarmStringInterior(*trie_);  // once per process, not at a request's first string
  }
  auto it = compiled_.find(c.schema);
  if (it == compiled_.end()) {
    jc::Grammar g;
    try {
      g = jc::CompileSchemaText(c.schema);
    } catch (const jc::SchemaError& e) {
      throw BadInput(std::string("Generate.constraint.schema: ") + e.what());
    }
    if (compiled_.size() >= 16) compiled_.clear();  // masks are a cache: dropping them changes no id
    it = compiled_.emplace(c.schema, std::make_shared<jc::Compiled>(std::move(g), *trie_)).first;
  }
  return std::make_shared<jc::Constrained>(it->second, *trie_, c.after);
}

TokenChooser ConstrainedChooser(std::shared_ptr<jc::Constrained> c, int64_t vocab, SamplingParams s, size_t before) {
  auto masked = std::make_shared<std::vector<float>>();
  return [c = std::move(c), vocab, s, before, masked](const float* logits, const std::vector<int32_t>& ids) {
    const std::span<const int32_t> generated(ids.data() + before, ids.size() - before);
    c->Mask(logits, vocab, generated, *masked);
    return SampleToken(masked->data(), vocab, ids, static_cast<int64_t>(generated.size()), s);
  };
}

}  // namespace k3::compute
