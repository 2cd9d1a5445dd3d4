#include "launcher/prompt_tokens.h"

#include "services/tokenizer/tokenizer.h"

namespace k3::launch {

std::vector<int32_t> EncodePrompt(const std::string& tokenizer_dir, const std::string& text) {
  const tok::Tokenizer t = tok::Tokenizer::Load(tokenizer_dir);
  const std::vector<uint32_t> ids = t.Encode(text, false);
  return {ids.begin(), ids.end()};
}

std::string DecodeIds(const std::string& tokenizer_dir, const std::vector<int32_t>& ids) {
  const tok::Tokenizer t = tok::Tokenizer::Load(tokenizer_dir);
  return t.Decode({ids.begin(), ids.end()});
}

}  // namespace k3::launch
