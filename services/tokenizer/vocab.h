// The tokenizer's tables, loaded from a tokenizer directory:
//   tiktoken.model         one "base64(token bytes) SP rank" per line, ranks 0..N-1 each once
//   tokenizer_config.json  "added_tokens_decoder": {"<id>": {"content": "...", ...}, ...}
// Added (special) tokens take the ids the config gives them, which must lie at or above N.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "rank_table.h"

namespace k3::tok {

struct AddedToken {
  uint32_t id;
  std::string content;
  bool special;
};

class Vocab {
 public:
  // Throws k3::Error(kExitBadInput) with "file:line: what" on any malformed input.
  static Vocab Load(const std::string& dir);
  // Same, from in-memory contents; `model_name` / `config_name` label the error messages.
  static Vocab Parse(std::string_view model_text, std::string_view config_text,
                     const std::string& model_name, const std::string& config_name);

  uint32_t num_ranks() const { return num_ranks_; }
  // One past the largest id (rank or added token).
  uint32_t id_limit() const { return static_cast<uint32_t>(id_off_.size() - 1); }
  const RankTable& ranks() const { return ranks_; }
  const std::vector<AddedToken>& added() const { return added_; }

  // Bytes of an id; false if the id is neither a rank nor an added token.
  bool IdBytes(uint32_t id, std::string_view* out) const {
    if (id >= id_known_.size() || !id_known_[id]) return false;  // no id + 1: it overflows
    *out = std::string_view(id_bytes_).substr(id_off_[id], id_off_[id + 1] - id_off_[id]);
    return true;
  }
  bool IsAdded(uint32_t id) const { return id >= num_ranks_; }
  // Id of an added token by content, or kNoRank.
  uint32_t AddedId(std::string_view content) const;

 private:
  uint32_t num_ranks_ = 0;
  RankTable ranks_;
  std::vector<AddedToken> added_;
  std::string id_bytes_;           // all token bytes, indexed by id_off_
  std::vector<uint32_t> id_off_;   // id -> offset; size id_limit()+1
  std::vector<uint8_t> id_known_;  // gaps between ranks and added ids are unknown
};

}  // namespace k3::tok
