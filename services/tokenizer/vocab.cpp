#include "vocab.h"

#include <charconv>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>

#include "common/error.h"
#include "common/json_strict.h"
#include "common/user_file.h"
#include "base64.h"
#include "utf8.h"

namespace k3::tok {
namespace {

std::string ReadFile(const std::string& path) { return ReadUserFile(path, kMaxTokenizerFileBytes, "", kExitBadInput); }

Error LineError(const std::string& name, size_t line, const std::string& what) {
  return BadInput(name + ":" + std::to_string(line) + ": " + what);
}

}  // namespace

Vocab Vocab::Load(const std::string& dir) {
  const std::string model = dir + "/tiktoken.model";
  const std::string config = dir + "/tokenizer_config.json";
  const std::string model_text = ReadFile(model);  // model first: errors name it first
  return Parse(model_text, ReadFile(config), model, config);
}

Vocab Vocab::Parse(std::string_view model_text, std::string_view config_text,
                   const std::string& model_name, const std::string& config_name) {
  Vocab v;
  // --- tiktoken.model: rank -> bytes; lines may end in \r\n, blank lines are skipped.
  std::vector<std::string> by_rank;
  std::vector<size_t> line_of_rank;
  size_t line_no = 0;
  size_t pos = 0;
  while (pos < model_text.size()) {
    size_t eol = model_text.find('\n', pos);
    if (eol == std::string_view::npos) eol = model_text.size();
    std::string_view line = model_text.substr(pos, eol - pos);
    pos = eol + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;
    const size_t sp = line.find(' ');
    if (sp == std::string_view::npos || line.find(' ', sp + 1) != std::string_view::npos)
      throw LineError(model_name, line_no, "expected \"base64 rank\"");
    const std::string_view b64 = line.substr(0, sp);
    const std::string_view rank_text = line.substr(sp + 1);
    auto bytes = Base64Decode(b64);
    if (!bytes) throw LineError(model_name, line_no, "malformed base64");
    if (bytes->empty()) throw LineError(model_name, line_no, "empty token");
    uint32_t rank = 0;
    auto [end, ec] = std::from_chars(rank_text.data(), rank_text.data() + rank_text.size(), rank);
    if (ec != std::errc() || end != rank_text.data() + rank_text.size() || rank_text.empty() ||
        (rank_text.size() > 1 && rank_text[0] == '0'))
      throw LineError(model_name, line_no, "malformed rank \"" + std::string(rank_text) + "\"");
    if (rank >= kRankLimit) throw LineError(model_name, line_no, "rank too large");
    if (rank >= by_rank.size()) {
      by_rank.resize(rank + 1);
      line_of_rank.resize(rank + 1, 0);
    }
    if (line_of_rank[rank] != 0)
      throw LineError(model_name, line_no,
                      "duplicate rank " + std::to_string(rank) + " (first on line " +
                          std::to_string(line_of_rank[rank]) + ")");
    by_rank[rank] = std::move(*bytes);
    line_of_rank[rank] = line_no;
  }
  if (by_rank.empty()) throw BadInput(model_name + ": no ranks");
  for (size_t r = 0; r < by_rank.size(); ++r)
    if (line_of_rank[r] == 0)
      throw BadInput(model_name + ": missing rank " + std::to_string(r) + " (ranks must be 0.." +
                     std::to_string(by_rank.size() - 1) + " without gaps)");
  v.num_ranks_ = static_cast<uint32_t>(by_rank.size());
  for (uint32_t r = 0; r < v.num_ranks_; ++r) v.ranks_.Add(by_rank[r], r);
  uint32_t d1 = 0, d2 = 0;
  if (!v.ranks_.Finish(&d1, &d2))
    throw LineError(model_name, line_of_rank[d2],
                    "token bytes duplicate those of rank " + std::to_string(d1) + " (line " +
                        std::to_string(line_of_rank[d1]) + ")");
  // Byte-level BPE needs every single byte as a token, else some input has no encoding.
  for (int b = 0; b < 256; ++b) {
    const char c = static_cast<char>(b);
    if (v.ranks_.Find(&c, 1) == kNoRank)
      throw BadInput(model_name + ": no token for byte " + std::to_string(b));
  }

  // --- tokenizer_config.json: added_tokens_decoder.
  // Strict: a repeated id key is an error here, where nlohmann alone would keep the last.
  const nlohmann::json cfg = ParseJsonStrict(config_text, config_name, kExitBadInput);
  if (!cfg.is_object() || !cfg.contains("added_tokens_decoder") ||
      !cfg["added_tokens_decoder"].is_object())
    throw BadInput(config_name + ": missing object \"added_tokens_decoder\"");
  std::map<uint32_t, AddedToken> by_id;
  for (const auto& [key, val] : cfg["added_tokens_decoder"].items()) {
    const std::string where = config_name + ": added_tokens_decoder[\"" + key + "\"]: ";
    uint32_t id = 0;
    auto [end, ec] = std::from_chars(key.data(), key.data() + key.size(), id);
    if (key.empty() || ec != std::errc() || end != key.data() + key.size() ||
        (key.size() > 1 && key[0] == '0'))
      throw BadInput(where + "key is not a decimal id");
    if (id < v.num_ranks_)
      throw BadInput(where + "id collides with BPE rank (ranks are 0.." +
                     std::to_string(v.num_ranks_ - 1) + ")");
    if (id >= (1u << 24)) throw BadInput(where + "id too large");
    if (!val.is_object() || !val.contains("content") || !val["content"].is_string())
      throw BadInput(where + "needs a string \"content\"");
    const std::string content = val["content"].get<std::string>();
    if (content.empty()) throw BadInput(where + "empty content");
    if (!IsValidUtf8(content)) throw BadInput(where + "content is not UTF-8");
    bool special = true;
    if (val.contains("special")) {
      if (!val["special"].is_boolean()) throw BadInput(where + "\"special\" must be a boolean");
      special = val["special"].get<bool>();
    }
    by_id[id] = AddedToken{id, content, special};  // the strict parser refused repeated keys
  }
  for (const auto& [id, tok] : by_id) {
    for (const auto& prev : v.added_)
      if (prev.content == tok.content)
        throw BadInput(config_name + ": added tokens " + std::to_string(prev.id) + " and " +
                       std::to_string(id) + " share content \"" + tok.content + "\"");
    v.added_.push_back(tok);
  }

  // --- id -> bytes for decoding.
  const uint32_t limit = v.added_.empty() ? v.num_ranks_ : v.added_.back().id + 1;
  v.id_off_.assign(limit + 1, 0);
  v.id_known_.assign(limit, 0);
  std::vector<const std::string*> src(limit, nullptr);
  for (uint32_t r = 0; r < v.num_ranks_; ++r) src[r] = &by_rank[r];
  for (const auto& a : v.added_) src[a.id] = &a.content;
  for (uint32_t id = 0; id < limit; ++id) {
    v.id_off_[id] = static_cast<uint32_t>(v.id_bytes_.size());
    if (src[id]) {
      v.id_bytes_ += *src[id];
      v.id_known_[id] = 1;
    }
  }
  v.id_off_[limit] = static_cast<uint32_t>(v.id_bytes_.size());
  return v;
}

uint32_t Vocab::AddedId(std::string_view content) const {
  for (const auto& a : added_)
    if (a.content == content) return a.id;
  return kNoRank;
}

}  // namespace k3::tok
