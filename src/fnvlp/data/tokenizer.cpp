#include "fnvlp/data/tokenizer.hpp"

#include <unicode/uchar.h>
#include <unicode/unorm2.h>
#include <unicode/ustring.h>
#include <unicode/utf16.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "fnvlp/core/error.hpp"
#include "fnvlp/core/sha256.hpp"

namespace fnvlp::data {

namespace {

// BERT's WordpieceTokenizer turns any word longer than this (in code points) into [UNK].
constexpr size_t kMaxCharsPerWord = 100;

bool is_cont_byte(unsigned char c) { return (c & 0xC0) == 0x80; }

// Byte offset of the first byte that is not part of a well-formed UTF-8 sequence, or npos.
size_t utf8_error_offset(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    // Captions are nearly all ASCII: skip 8 bytes at a time while no high bit is set.
    while (i + 8 <= n) {
      uint64_t w;
      std::memcpy(&w, p + i, 8);
      if (w & 0x8080808080808080ULL) break;
      i += 8;
    }
    if (i >= n) break;
    const unsigned char c = p[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t need;
    unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
    if (c < 0xC2) {
      return i;  // stray continuation byte, or an overlong 2-byte form (C0, C1)
    } else if (c < 0xE0) {
      need = 1;
    } else if (c < 0xF0) {
      need = 2;
      if (c == 0xE0) lo = 0xA0;  // overlong 3-byte form
      if (c == 0xED) hi = 0x9F;  // U+D800..U+DFFF surrogates
    } else if (c < 0xF5) {
      need = 3;
      if (c == 0xF0) lo = 0x90;  // overlong 4-byte form
      if (c == 0xF4) hi = 0x8F;  // above U+10FFFF
    } else {
      return i;  // F5..FF start no valid sequence
    }
    if (i + need >= n) return i;  // truncated at the end of the input
    if (p[i + 1] < lo || p[i + 1] > hi) return i;
    for (size_t k = 2; k <= need; ++k) {
      if (!is_cont_byte(p[i + k])) return i;
    }
    i += need + 1;
  }
  return std::string_view::npos;
}

// Decodes one code point of input already checked by utf8_error_offset.
char32_t decode_valid(const unsigned char* p, size_t& i) {
  const unsigned char c = p[i];
  if (c < 0x80) {
    ++i;
    return c;
  }
  if (c < 0xE0) {
    char32_t cp = ((c & 0x1Fu) << 6) | (p[i + 1] & 0x3Fu);
    i += 2;
    return cp;
  }
  if (c < 0xF0) {
    char32_t cp = ((c & 0x0Fu) << 12) | ((p[i + 1] & 0x3Fu) << 6) | (p[i + 2] & 0x3Fu);
    i += 3;
    return cp;
  }
  char32_t cp = ((c & 0x07u) << 18) | ((p[i + 1] & 0x3Fu) << 12) | ((p[i + 2] & 0x3Fu) << 6) |
                (p[i + 3] & 0x3Fu);
  i += 4;
  return cp;
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

// BERT counts every printable non-alphanumeric ASCII character as punctuation, including
// symbols such as $ ^ ` that Unicode files under S*.
bool is_ascii_punct(unsigned c) {
  return (c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) ||
         (c >= 123 && c <= 126);
}

// The blocks BERT pads with spaces so each ideograph becomes its own word (Hangul, kana are not
// included, as in BERT).
bool is_cjk(UChar32 c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) ||
         (c >= 0x20000 && c <= 0x2A6DF) || (c >= 0x2A700 && c <= 0x2B73F) ||
         (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B820 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

// What BasicTokenizer's cleaning stage does with a code point. Deleted: U+0000, U+FFFD and
// every category C* character except \t \n \r. HuggingFace's _is_control tests
// category.startswith("C"), so unassigned (Cn) and private-use (Co) characters go too; Google's
// original tokenization.py deleted only Cc and Cf. We follow HuggingFace, whose tokenizer ALBEF
// uses. One u_charType call per code point, none for ASCII.
enum class Clean : uint8_t { kKeep, kDrop, kSpace, kCjk };

Clean clean_class(UChar32 c) {
  if (c < 0x80) {
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') return Clean::kSpace;
    return c < 0x20 || c == 0x7F ? Clean::kDrop : Clean::kKeep;
  }
  if (c == 0xFFFD) return Clean::kDrop;
  switch (u_charType(c)) {
    case U_CONTROL_CHAR:
    case U_FORMAT_CHAR:
    case U_UNASSIGNED:
    case U_PRIVATE_USE_CHAR:
    case U_SURROGATE:
      return Clean::kDrop;
    case U_SPACE_SEPARATOR:
      return Clean::kSpace;
    default:
      return is_cjk(c) ? Clean::kCjk : Clean::kKeep;
  }
}

// What the splitting stage (after lower-casing and NFD) does with a code point: Mn is dropped
// (accent stripping), whitespace ends the word, punctuation is a word of its own.
enum class Split : uint8_t { kWord, kMark, kBreak, kPunct };

Split split_class(UChar32 c) {
  if (c < 0x80) return c == ' ' ? Split::kBreak : is_ascii_punct(c) ? Split::kPunct : Split::kWord;
  switch (u_charType(c)) {
    case U_NON_SPACING_MARK:
      return Split::kMark;
    // Python's str.split() also breaks at U+2028/U+2029 (Zl, Zp), which cleaning keeps.
    case U_SPACE_SEPARATOR:
    case U_LINE_SEPARATOR:
    case U_PARAGRAPH_SEPARATOR:
      return Split::kBreak;
    case U_DASH_PUNCTUATION:
    case U_START_PUNCTUATION:
    case U_END_PUNCTUATION:
    case U_CONNECTOR_PUNCTUATION:
    case U_OTHER_PUNCTUATION:
    case U_INITIAL_PUNCTUATION:
    case U_FINAL_PUNCTUATION:
      return Split::kPunct;
    default:
      return Split::kWord;
  }
}

// Runs an ICU "preflighting" C function (returns the needed length, sets
// U_BUFFER_OVERFLOW_ERROR when dst is too small) into a reusable buffer.
template <class F>
void icu_into(std::u16string& dst, size_t guess, const char* what, F&& f) {
  dst.resize(std::max<size_t>(guess, 16));
  UErrorCode st = U_ZERO_ERROR;
  int32_t n = f(dst.data(), static_cast<int32_t>(dst.size()), &st);
  if (st == U_BUFFER_OVERFLOW_ERROR) {
    dst.resize(static_cast<size_t>(n));
    st = U_ZERO_ERROR;
    n = f(dst.data(), n, &st);
  }
  FNVLP_CHECK(U_SUCCESS(st), "tokenizer: ICU " << what << " failed: " << u_errorName(st));
  dst.resize(static_cast<size_t>(n));
}

uint64_t hash_bytes(const char* p, size_t n) {
  uint64_t h = 0x9E3779B97F4A7C15ULL ^ (n * 0xFF51AFD7ED558CCDULL);
  for (; n >= 8; p += 8, n -= 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    h = (h ^ w) * 0xBF58476D1CE4E5B9ULL;
    h ^= h >> 29;
  }
  if (n > 0) {
    uint64_t w = 0;
    std::memcpy(&w, p, n);
    h = (h ^ w) * 0xBF58476D1CE4E5B9ULL;
    h ^= h >> 29;
  }
  h *= 0x94D049BB133111EBULL;
  return h ^ (h >> 32);
}

// Open-addressing map from byte strings to token ids; the key of id k is tokens[k] without its
// first `skip` bytes ("##" for continuation pieces). Vocabulary lookups dominate tokenization
// time: flat 8-byte slots cost one or two cache lines per probe sequence, where a node-based
// std::unordered_map chases a pointer per bucket and per node.
class PieceTable {
 public:
  PieceTable(size_t n, size_t skip) : skip_(skip) {
    size_t cap = 16;
    while (cap < 2 * n) cap *= 2;  // load factor <= 1/2 keeps misses short
    slots_.assign(cap, Slot{0, -1});
    mask_ = cap - 1;
  }

  // Inserts `id` unless its key is present; returns the id that holds the key afterwards.
  int32_t insert(int32_t id, const std::vector<std::string>& tokens) {
    const std::string& t = tokens[static_cast<size_t>(id)];
    const std::string_view key(t.data() + skip_, t.size() - skip_);
    const uint64_t h = hash_bytes(key.data(), key.size());
    for (size_t i = h & mask_;; i = (i + 1) & mask_) {
      Slot& s = slots_[i];
      if (s.id < 0) {
        s = Slot{static_cast<uint32_t>(h >> 32), id};
        return id;
      }
      if (s.tag == static_cast<uint32_t>(h >> 32) && equal(s.id, key, tokens)) return s.id;
    }
  }

  int32_t find(std::string_view key, const std::vector<std::string>& tokens) const {
    const uint64_t h = hash_bytes(key.data(), key.size());
    for (size_t i = h & mask_;; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.id < 0) return -1;
      if (s.tag == static_cast<uint32_t>(h >> 32) && equal(s.id, key, tokens)) return s.id;
    }
  }

 private:
  struct Slot {
    uint32_t tag;  // high half of the key's hash
    int32_t id;    // -1: empty
  };
  bool equal(int32_t id, std::string_view key, const std::vector<std::string>& tokens) const {
    const std::string& t = tokens[static_cast<size_t>(id)];
    return t.size() - skip_ == key.size() &&
           std::memcmp(t.data() + skip_, key.data(), key.size()) == 0;
  }
  std::vector<Slot> slots_;
  size_t mask_ = 0;
  size_t skip_;
};

const UNormalizer2* nfd_instance() {
  static const UNormalizer2* nfd = [] {
    UErrorCode st = U_ZERO_ERROR;
    const UNormalizer2* n = unorm2_getNFDInstance(&st);
    FNVLP_CHECK(U_SUCCESS(st) && n,
                "tokenizer: ICU NFD normalizer unavailable: " << u_errorName(st));
    return n;
  }();
  return nfd;
}

}  // namespace

bool is_valid_utf8(std::string_view s) { return utf8_error_offset(s) == std::string_view::npos; }

struct WordPieceTokenizer::Vocab {
  std::string path;
  std::string sha256;
  std::vector<std::string> tokens;
  PieceTable whole{0, 0};  // every token
  PieceTable cont{0, 2};   // "##x" tokens, keyed by "x", so lookups need no "##" + copy
  size_t max_whole = 0;    // longest token in bytes: bounds the greedy search
  size_t max_cont = 0;
  std::array<int32_t, 128> ascii_char{};  // id of each 1-char ASCII word (punctuation fast path)
  int32_t pad = -1, unk = -1, cls = -1, sep = -1, mask = -1;

  // Greedy longest-match-first WordPiece of one word (UTF-8, `ncp` code points); appends its
  // pieces, or a single [UNK] when the word is too long or cannot be covered completely.
  void word(std::string_view w, size_t ncp, std::vector<int32_t>& out) const {
    if (ncp > kMaxCharsPerWord) {
      out.push_back(unk);
      return;
    }
    const size_t mark = out.size();
    const size_t n = w.size();
    size_t i = 0;
    while (i < n) {
      const PieceTable& map = i == 0 ? whole : cont;
      size_t j = std::min(n, i + (i == 0 ? max_whole : max_cont));
      int32_t found = -1;
      for (; j > i; --j) {
        // Pieces end on code point boundaries, as Python's slicing of a str does.
        if (j < n && is_cont_byte(static_cast<unsigned char>(w[j]))) continue;
        found = map.find(w.substr(i, j - i), tokens);
        if (found >= 0) break;
      }
      if (found < 0) {
        out.resize(mark);
        out.push_back(unk);
        return;
      }
      out.push_back(found);
      i = j;
    }
  }

  // Appends the word pieces of `text` (valid UTF-8) to `out`, stopping once `limit` pieces were
  // appended (encode() needs no more, and captions can be long).
  void run(std::string_view text, size_t limit, std::vector<int32_t>& out) const;
  void run_ascii(std::string_view text, size_t limit, std::vector<int32_t>& out) const;
  void run_unicode(std::string_view text, size_t limit, std::vector<int32_t>& out) const;
};

void WordPieceTokenizer::Vocab::run(std::string_view text, size_t limit,
                                    std::vector<int32_t>& out) const {
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  const bool ascii = std::none_of(p, p + text.size(), [](unsigned char c) { return c >= 0x80; });
  if (ascii) {
    run_ascii(text, limit, out);
  } else {
    run_unicode(text, limit, out);
  }
}

// ASCII needs no ICU: the only normalisation is A-Z -> a-z, and the character classes are fixed.
// The word is built in a stack buffer, so nothing is allocated here beyond `out` growing.
void WordPieceTokenizer::Vocab::run_ascii(std::string_view text, size_t limit,
                                          std::vector<int32_t>& out) const {
  const size_t start = out.size();
  char buf[kMaxCharsPerWord];
  size_t len = 0;  // characters in the current word; only the first kMaxCharsPerWord are kept
  auto flush = [&] {
    if (len > 0) word(std::string_view(buf, std::min(len, kMaxCharsPerWord)), len, out);
    len = 0;
  };
  for (unsigned char c : text) {
    if (out.size() - start >= limit) break;
    if ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9')) {
      if (len < kMaxCharsPerWord) buf[len] = static_cast<char>(c);
      ++len;
    } else if (c >= 'A' && c <= 'Z') {
      if (len < kMaxCharsPerWord) buf[len] = static_cast<char>(c + ('a' - 'A'));
      ++len;
    } else if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
      flush();
    } else if (c < 0x20 || c == 0x7F) {
      // NUL and other C0 controls and DEL are deleted, not word breaks: "a\x01b" is "ab".
    } else {
      flush();  // all remaining printable ASCII is punctuation: a word of its own
      out.push_back(ascii_char[c]);
    }
  }
  flush();
  if (out.size() - start > limit) out.resize(start + limit);
}

// Non-ASCII text: HuggingFace BasicTokenizer = clean (drop controls, map whitespace to ' ') ->
// pad CJK ideographs -> NFC -> split on whitespace -> per token lower() and NFD, drop Mn ->
// split off punctuation. We lower-case and decompose the whole cleaned text at once instead of
// per token: whitespace is a normalisation starter and is neither cased nor case-ignorable, so
// neither NFD nor the Final_Sigma context of lower-casing crosses a word break, and the result is
// the same. The NFC step is skipped: lower-casing preserves canonical equivalence and NFD follows,
// so it cannot change the outcome.
void WordPieceTokenizer::Vocab::run_unicode(std::string_view text, size_t limit,
                                            std::vector<int32_t>& out) const {
  // ICU takes int32_t lengths; CJK padding can triple the UTF-16 length of the text.
  FNVLP_CHECK(text.size() < static_cast<size_t>(INT32_MAX) / 4,
              "tokenizer: text of " << text.size() << " bytes is too long");
  const size_t start = out.size();
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  std::u16string cleaned;
  cleaned.reserve(text.size() + 8);
  auto push16 = [&cleaned](UChar32 c) {
    if (c < 0x10000) {
      cleaned.push_back(static_cast<char16_t>(c));
    } else {
      cleaned.push_back(static_cast<char16_t>(U16_LEAD(c)));
      cleaned.push_back(static_cast<char16_t>(U16_TRAIL(c)));
    }
  };
  for (size_t i = 0; i < text.size();) {
    const auto c = static_cast<UChar32>(decode_valid(p, i));
    switch (clean_class(c)) {
      case Clean::kDrop:
        break;
      case Clean::kSpace:
        cleaned.push_back(u' ');
        break;
      case Clean::kCjk:
        cleaned.push_back(u' ');
        push16(c);
        cleaned.push_back(u' ');
        break;
      case Clean::kKeep:
        push16(c);
        break;
    }
  }

  // Full case mapping in the root locale matches Python's str.lower(): U+0130 -> "i\u0307",
  // final sigma -> U+03C2. (u_tolower would map each code point alone and miss both; an empty
  // locale keeps a Turkish default locale from changing 'I'.)
  std::u16string lower, nfd;
  const auto n_clean = static_cast<int32_t>(cleaned.size());
  icu_into(lower, cleaned.size() + cleaned.size() / 4, "lower-casing",
           [&](UChar* d, int32_t cap, UErrorCode* st) {
             return u_strToLower(d, cap, cleaned.data(), n_clean, "", st);
           });
  const UNormalizer2* nf = nfd_instance();
  const auto n_lower = static_cast<int32_t>(lower.size());
  icu_into(nfd, lower.size() + lower.size() / 2, "NFD", [&](UChar* d, int32_t cap, UErrorCode* st) {
    return unorm2_normalize(nf, lower.data(), n_lower, d, cap, st);
  });

  std::string w;
  w.reserve(64);
  size_t ncp = 0;
  auto flush = [&] {
    if (ncp > 0) word(w, ncp, out);
    w.clear();
    ncp = 0;
  };
  const auto n = static_cast<int32_t>(nfd.size());
  for (int32_t i = 0; i < n && out.size() - start < limit;) {
    UChar32 c;
    U16_NEXT(nfd.data(), i, n, c);
    switch (split_class(c)) {
      case Split::kMark:
        break;
      case Split::kBreak:
        flush();
        break;
      case Split::kPunct:
        flush();
        append_utf8(w, static_cast<char32_t>(c));
        ncp = 1;
        flush();
        break;
      case Split::kWord:
        append_utf8(w, static_cast<char32_t>(c));
        ++ncp;
        break;
    }
  }
  flush();
  if (out.size() - start > limit) out.resize(start + limit);
}

WordPieceTokenizer WordPieceTokenizer::from_file(const std::string& vocab_path) {
  auto v = std::make_shared<Vocab>();
  v->path = vocab_path;
  std::string bytes;
  {
    // A directory opens as a stream and fails only on the first read, with a libstdc++ message
    // that names no file (the vocabulary's folder given instead of the .txt in it).
    std::error_code ec;
    FNVLP_CHECK(!std::filesystem::is_directory(vocab_path, ec),
                "vocabulary file " << vocab_path
                                   << " is a directory (give the vocabulary .txt file in it)");
    errno = 0;
    std::ifstream in(vocab_path, std::ios::binary);
    FNVLP_CHECK(in.is_open(),
                "cannot open vocabulary file " << vocab_path << ": " << std::strerror(errno));
    bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    FNVLP_CHECK(!in.bad(), "error reading vocabulary file " << vocab_path);
  }
  FNVLP_CHECK(!bytes.empty(), "vocabulary file " << vocab_path << " is empty");
  v->sha256 = fnvlp::sha256_hex(bytes.data(), bytes.size());

  // One token per line; a final newline does not start another token.
  for (size_t pos = 0; pos < bytes.size();) {
    size_t eol = bytes.find('\n', pos);
    if (eol == std::string::npos) eol = bytes.size();
    v->tokens.emplace_back(bytes, pos, eol - pos);
    pos = eol + 1;
  }
  v->tokens.shrink_to_fit();
  FNVLP_CHECK(v->tokens.size() < static_cast<size_t>(INT32_MAX),
              "vocabulary " << vocab_path << " has too many lines");
  v->whole = PieceTable(v->tokens.size(), 0);
  v->cont = PieceTable(v->tokens.size(), 2);
  for (size_t k = 0; k < v->tokens.size(); ++k) {
    const std::string& t = v->tokens[k];
    const auto id = static_cast<int32_t>(k);
    FNVLP_CHECK(!t.empty(), "vocabulary " << vocab_path << ":" << k + 1 << ": empty token");
    FNVLP_CHECK(t.back() != '\r', "vocabulary " << vocab_path << ":" << k + 1
                                                << ": token ends in \\r (CRLF line endings?)");
    FNVLP_CHECK(is_valid_utf8(t),
                "vocabulary " << vocab_path << ":" << k + 1 << ": token is not valid UTF-8");
    const int32_t first = v->whole.insert(id, v->tokens);
    FNVLP_CHECK(first == id, "vocabulary " << vocab_path << ":" << k + 1 << ": duplicate token '"
                                           << t << "' (first at line " << first + 1 << ")");
    v->max_whole = std::max(v->max_whole, t.size());
    if (t.size() > 2 && t[0] == '#' && t[1] == '#') {
      v->cont.insert(id, v->tokens);
      v->max_cont = std::max(v->max_cont, t.size() - 2);
    }
  }
  auto special = [&](const char* name) {
    const int32_t id = v->whole.find(name, v->tokens);
    FNVLP_CHECK(id >= 0, "vocabulary " << vocab_path << ": missing special token " << name);
    return id;
  };
  v->pad = special("[PAD]");
  v->unk = special("[UNK]");
  v->cls = special("[CLS]");
  v->sep = special("[SEP]");
  v->mask = special("[MASK]");
  for (int c = 0; c < 128; ++c) {
    const char ch = static_cast<char>(c);
    const int32_t id = v->whole.find(std::string_view(&ch, 1), v->tokens);
    v->ascii_char[c] = id >= 0 ? id : v->unk;
  }
  return WordPieceTokenizer(std::move(v));
}

namespace {
void check_utf8(std::string_view text) {
  const size_t bad = utf8_error_offset(text);
  FNVLP_CHECK(bad == std::string_view::npos,
              "tokenizer: text is not valid UTF-8 (byte " << bad << " of " << text.size() << ")");
}
}  // namespace

std::vector<int32_t> WordPieceTokenizer::tokenize_ids(std::string_view text) const {
  check_utf8(text);
  std::vector<int32_t> out;
  out.reserve(text.size() / 4 + 4);
  v_->run(text, SIZE_MAX, out);
  return out;
}

std::vector<std::string> WordPieceTokenizer::tokenize(std::string_view text) const {
  std::vector<std::string> pieces;
  for (int32_t i : tokenize_ids(text)) pieces.push_back(v_->tokens[static_cast<size_t>(i)]);
  return pieces;
}

std::vector<int32_t> WordPieceTokenizer::encode(std::string_view text, size_t max_len) const {
  FNVLP_CHECK(max_len >= 2, "encode: max_len must be >= 2 for [CLS] and [SEP], got " << max_len);
  check_utf8(text);
  std::vector<int32_t> out;
  out.reserve(std::min(max_len, text.size() / 3 + 3));
  out.push_back(v_->cls);
  v_->run(text, max_len - 2, out);
  out.push_back(v_->sep);
  return out;
}

int32_t WordPieceTokenizer::id(std::string_view token) const {
  return v_->whole.find(token, v_->tokens);
}

const std::string& WordPieceTokenizer::token(int32_t id) const {
  FNVLP_CHECK(id >= 0 && static_cast<size_t>(id) < v_->tokens.size(),
              "token id " << id << " out of range [0, " << v_->tokens.size() << ") of vocabulary "
                          << v_->path);
  return v_->tokens[static_cast<size_t>(id)];
}

size_t WordPieceTokenizer::size() const { return v_->tokens.size(); }
const std::string& WordPieceTokenizer::vocab_sha256() const { return v_->sha256; }
const std::string& WordPieceTokenizer::vocab_path() const { return v_->path; }
int32_t WordPieceTokenizer::pad_id() const { return v_->pad; }
int32_t WordPieceTokenizer::unk_id() const { return v_->unk; }
int32_t WordPieceTokenizer::cls_id() const { return v_->cls; }
int32_t WordPieceTokenizer::sep_id() const { return v_->sep; }
int32_t WordPieceTokenizer::mask_id() const { return v_->mask; }
SpecialTokens WordPieceTokenizer::special_tokens() const {
  return {v_->pad, v_->cls, v_->sep, v_->mask};
}

}  // namespace fnvlp::data
