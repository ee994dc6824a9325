// libFuzzer target: the WordPiece tokenizer (bert-base-uncased vocabulary from shared/). Any
// byte string: invalid UTF-8 must throw fnvlp::Error (and only then); valid text must tokenize to
// known ids, and encode() must keep [CLS] first, [SEP] last and the length bound.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "fnvlp/core/error.hpp"
#include "fnvlp/data/tokenizer.hpp"

using namespace fnvlp::data;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const WordPieceTokenizer tok = WordPieceTokenizer::from_file(FNVLP_VOCAB);
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const bool valid = is_valid_utf8(text);
  try {
    const auto ids = tok.tokenize_ids(text);
    if (!valid) std::abort();  // accepted invalid UTF-8
    for (int32_t id : ids)
      if (id < 0 || static_cast<size_t>(id) >= tok.size()) std::abort();
    const size_t max_len = 2 + size % 40;
    const auto enc = tok.encode(text, max_len);
    if (enc.size() < 2 || enc.size() > max_len || enc.front() != tok.cls_id() ||
        enc.back() != tok.sep_id())
      std::abort();
  } catch (const fnvlp::Error&) {
    if (valid) std::abort();  // rejected valid UTF-8
  }
  return 0;
}
