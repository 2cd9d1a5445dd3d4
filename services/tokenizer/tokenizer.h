// Text <-> ids for K3: the tiktoken-style BPE vocabulary, the Kimi pre-tokenizer and the
// added (special) tokens. Immutable after Load; Encode/Decode are thread-safe.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "pretokenizer.h"
#include "vocab.h"

namespace k3::tok {

class PieceCache;

class Tokenizer {
 public:
  // Reads DIR/tiktoken.model and DIR/tokenizer_config.json (k3::Error kExitBadInput).
  static Tokenizer Load(const std::string& dir);
  explicit Tokenizer(Vocab vocab);

  // allow_special=false: every byte is ordinary text, so "<|end_of_msg|>" typed by a user
  // is encoded as the characters it consists of. allow_special=true: added-token contents
  // found in `text` (leftmost, longest first) become their ids; used only for control
  // segments the program writes itself.
  std::vector<uint32_t> Encode(std::string_view text, bool allow_special) const;
  // Appends the ids of `text` with no added tokens recognised.
  void EncodeOrdinary(std::string_view text, std::vector<uint32_t>* out) const;

  // Concatenated bytes of the ids; throws kExitBadInput naming the first unknown id.
  std::string Decode(const std::vector<uint32_t>& ids) const;

  const Vocab& vocab() const { return vocab_; }

 private:
  void EncodeOrdinary(std::string_view text, std::vector<uint32_t>* out, Splitter& splitter, PieceCache& cache) const;

  Vocab vocab_;
  std::shared_ptr<const SplitPattern> pattern_;
  std::vector<uint32_t> specials_by_length_;  // indices into vocab_.added(), longest first
  uint8_t special_first_byte_[256] = {};
};

// Turns a stream of ids into bytes that never end inside a UTF-8 character: bytes of an
// incomplete but still completable character are held back until the next ids finish it.
// Ill-formed bytes are passed through (they can never become valid).
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tok) : tok_(tok) {}
  // Bytes ready to print after `id` (may be empty). Throws on an unknown id.
  std::string Push(uint32_t id);
  // Whatever is still held back (an incomplete character at the end of the stream).
  std::string Finish();

 private:
  const Tokenizer& tok_;
  std::string pending_;
};

}  // namespace k3::tok
