#include "common/end_ids.h"

#include <algorithm>
#include <charconv>
#include <fstream>
#include <sstream>

#include "common/error.h"
#include "common/user_file.h"
#include "common/json_strict.h"

namespace k3 {

std::vector<int32_t> MergeIds(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  std::sort(a.begin(), a.end());
  a.erase(std::unique(a.begin(), a.end()), a.end());
  return a;
}

std::vector<int32_t> DefaultEndIds(const ModelConfig& cfg, const std::string& tokenizer_dir) {
  std::vector<int32_t> ids;
  auto add = [&](int64_t id) {
    if (id >= 0 && id < cfg.vocab_size) ids.push_back(static_cast<int32_t>(id));
  };
  for (int64_t id : cfg.eos_token_ids) add(id);
  if (!tokenizer_dir.empty()) {
    const std::string path = tokenizer_dir + "/tokenizer_config.json";
    const nlohmann::json j =
        ParseJsonStrict(ReadUserFile(path, kMaxTokenizerFileBytes, "tokenizer config", kExitBadInput), path, kExitBadInput);
    if (!j.is_object() || !j.contains("added_tokens_decoder") || !j["added_tokens_decoder"].is_object())
      throw BadInput(path + ": missing object \"added_tokens_decoder\"");
    for (const auto& [key, val] : j["added_tokens_decoder"].items()) {
      if (!val.is_object() || !val.contains("content") || !val["content"].is_string()) continue;
      const std::string content = val["content"].get<std::string>();
      if (content != "[EOS]" && content != "<|end_of_msg|>") continue;
      int64_t id = -1;
      const auto [end, ec] = std::from_chars(key.data(), key.data() + key.size(), id);
      if (ec != std::errc() || end != key.data() + key.size())
        throw BadInput(path + ": added_tokens_decoder key \"" + Printable(key) + "\" is not a decimal id");
      add(id);
    }
  }
  return MergeIds(std::move(ids), {});
}

}  // namespace k3
