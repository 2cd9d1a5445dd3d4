// Generate.constraint in compute (docs/sampling.md "Constrained output"): the vocabulary's
// byte strings (the tokenizer files of --tokenizer, read at the first constrained request),
// the compiled schemas with their cached masks (kept for the schemas asked for most recently),
// and the chooser that masks the logits before the sampler chooses.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "common/ipc/messages.h"
#include "common/json_constraint/constraint.h"
#include "speculate.h"
#include "sampler.h"

namespace k3::compute {

class ConstraintLibrary {
 public:
  // `tokenizer_dir` "" refuses every constraint; `vocab` the model's (logits) size.
  ConstraintLibrary(std::string tokenizer_dir, int64_t vocab) : dir_(std::move(tokenizer_dir)), vocab_(vocab) {}
  // One request's progress; throws BadInput (a bad schema, no tokenizer, no `after`).
  std::shared_ptr<json_constraint::Constrained> For(const ipc::compute::Constraint& c);

 private:
  std::string dir_;
  int64_t vocab_;
  std::unique_ptr<json_constraint::TokenTrie> trie_;
  std::map<std::string, std::shared_ptr<json_constraint::Compiled>> compiled_;
};

// SampleToken over the constrained logits; `before` is how many ids of the sequence precede
// the generated ones (the chooser sees the whole sequence).
TokenChooser ConstrainedChooser(std::shared_ptr<json_constraint::Constrained> c, int64_t vocab, SamplingParams s,
                                size_t before);

}  // namespace k3::compute
