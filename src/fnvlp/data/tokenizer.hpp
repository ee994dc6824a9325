#pragma once
// BERT WordPiece tokenizer with bert-base-uncased behaviour (HuggingFace BertTokenizer with
// do_lower_case=True): the ids it produces go into shards (ARCHITECTURE.md §2, `tokens`) and must
// be the ones ALBEF's text encoder was trained on. tests/bench/wordpiece.py is an independent
// Python reference that the unit test compares against. Known difference from HuggingFace:
// special-token strings inside the text ("[MASK]") are split like other text (Google BERT's
// behaviour), not kept whole.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace fnvlp::data {

// Strict UTF-8 check: rejects overlong forms, surrogates (U+D800..U+DFFF), code points above
// U+10FFFF, stray continuation bytes, 0xC0/0xC1/0xF5..0xFF and truncated sequences.
bool is_valid_utf8(std::string_view s);

// Ids of the vocabulary's [PAD] [CLS] [SEP] [MASK]: what MLM masking must know (never mask [PAD],
// [CLS], [SEP]; replace by [MASK]). -1 where unknown.
struct SpecialTokens {
  int64_t pad = -1, cls = -1, sep = -1, mask = -1;
  bool known() const { return pad >= 0 && cls >= 0 && sep >= 0 && mask >= 0; }
};

// Immutable after from_file(); copies share the vocabulary, and all methods are const and safe to
// call from several threads at once.
class WordPieceTokenizer {
 public:
  // Loads a vocabulary (one token per line, '\n'-separated; id = line number - 1). Throws
  // fnvlp::Error naming the file (and line) on: unreadable file, empty file, empty token, token
  // ending in '\r' (CRLF file), token that is not valid UTF-8, duplicate token, missing
  // [PAD]/[UNK]/[CLS]/[SEP]/[MASK].
  static WordPieceTokenizer from_file(const std::string& vocab_path);

  // Word pieces of `text`, without special tokens. Throws fnvlp::Error if `text` is not valid
  // UTF-8.
  std::vector<std::string> tokenize(std::string_view text) const;
  std::vector<int32_t> tokenize_ids(std::string_view text) const;
  // [CLS] ids... [SEP], the word pieces truncated so that the total length is <= max_len
  // (max_len >= 2); [SEP] is always last.
  std::vector<int32_t> encode(std::string_view text, size_t max_len) const;

  int32_t id(std::string_view token) const;  // -1 when absent
  const std::string& token(int32_t id) const;
  size_t size() const;
  const std::string& vocab_sha256() const;  // hex sha256 of the vocabulary file's bytes
  const std::string& vocab_path() const;

  int32_t pad_id() const;
  int32_t unk_id() const;
  int32_t cls_id() const;
  int32_t sep_id() const;
  int32_t mask_id() const;
  SpecialTokens special_tokens() const;

 private:
  struct Vocab;  // defined in tokenizer.cpp
  explicit WordPieceTokenizer(std::shared_ptr<const Vocab> vocab) : v_(std::move(vocab)) {}
  std::shared_ptr<const Vocab> v_;
};

}  // namespace fnvlp::data
