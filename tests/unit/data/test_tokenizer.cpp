// WordPieceTokenizer: bert-base-uncased vocabulary facts, golden ids for real Flickr8k captions,
// BasicTokenizer edge cases, strict UTF-8 validation, vocabulary load errors, and agreement with
// the independent Python reference (tests/bench/wordpiece.py) over every caption.
#include "fnvlp/data/tokenizer.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "fnvlp/core/error.hpp"

namespace fnvlp::data {
namespace {

using Ids = std::vector<int32_t>;
using Pieces = std::vector<std::string>;

const std::string kVocab = FNVLP_SHARED_DIR "/data/vocab/bert-base-uncased-vocab.txt";
const std::string kCaptions = FNVLP_SHARED_DIR "/data/flickr8k-128/captions.json";
const std::string kReference = FNVLP_SOURCE_DIR "/tests/bench/wordpiece.py";
constexpr const char* kPython = "/usr/bin/python3";

const WordPieceTokenizer& bert() {
  static const WordPieceTokenizer tok = WordPieceTokenizer::from_file(kVocab);
  return tok;
}

const std::vector<std::string>& captions() {
  static const std::vector<std::string> texts = [] {
    std::ifstream in(kCaptions);
    EXPECT_TRUE(in.is_open()) << kCaptions;
    std::vector<std::string> out;
    for (const auto& entry : nlohmann::json::parse(in)) out.push_back(entry.at("caption"));
    return out;
  }();
  return texts;
}

std::string write_temp(const std::string& name, const std::string& bytes) {
  const std::string path =
      ::testing::TempDir() + "fnvlp_tok_" + std::to_string(getpid()) + "_" + name;
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

// Runs `f`, expecting fnvlp::Error, and returns its message.
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const fnvlp::Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "no fnvlp::Error thrown";
  return "";
}

TEST(Tokenizer, BertVocabularyFacts) {
  const auto& tok = bert();
  EXPECT_EQ(tok.size(), 30522u);
  EXPECT_EQ(tok.pad_id(), 0);
  EXPECT_EQ(tok.unk_id(), 100);
  EXPECT_EQ(tok.cls_id(), 101);
  EXPECT_EQ(tok.sep_id(), 102);
  EXPECT_EQ(tok.mask_id(), 103);
  const fnvlp::data::SpecialTokens st = tok.special_tokens();
  EXPECT_EQ(std::vector<int64_t>({st.pad, st.cls, st.sep, st.mask}),
            std::vector<int64_t>({0, 101, 102, 103}));
  EXPECT_EQ(tok.vocab_sha256(), "07eced375cec144d27c900241f3e339478dec958f92fddbc551f295c992038a3");
  EXPECT_EQ(tok.id("[MASK]"), 103);
  EXPECT_EQ(tok.id("the"), 1996);
  EXPECT_EQ(tok.id("##s"), 2015);
  EXPECT_EQ(tok.id("no-such-token"), -1);
  EXPECT_EQ(tok.id(""), -1);
  EXPECT_EQ(tok.token(1037), "a");
  EXPECT_EQ(tok.token(30521), "##\xEF\xBD\x9E");  // last line: "##" + U+FF5E
  EXPECT_THROW(tok.token(-1), fnvlp::Error);
  EXPECT_THROW(tok.token(30522), fnvlp::Error);
}

struct Golden {
  size_t index;  // position in captions.json
  const char* text;
  Ids ids;  // tokenize_ids(text): no [CLS]/[SEP]
};

// Produced with tests/bench/wordpiece.py. Hand-checked (each id looked up with
// `sed -n "$((id+1))p" bert-base-uncased-vocab.txt`, and for every "##" word the greedy choice
// confirmed by grepping the vocabulary for each longer prefix, e.g. "penz"/"penza"/... absent,
// "pen" present): 984 (quotes, upper case, ad ##hd, t - shirt), 1627 (pen ##zan ##ce,
// welcome ##s), 2530 (' as quote), 7905 (# and digits, sooner ##s), 22219 (= inside a word,
// ri ##f, sl ##ed ##s), 9273 (ci ##ger ##ette, graf ##fi ##tti), 269 (BMX -> b ##mx),
// 13075 (hyphen, bud ##wei ##ser), 7504 (n ' t, so ##mbo ##dy, gr ##ou ##cho),
// 27523 (o ' clock), 34865 (1950s is one token), 3542 (red - headed, w ##ha ##ck, !),
// 18800 (mo ##ust ##ache, cigar ##s).
const std::vector<Golden>& golden() {
  static const std::vector<Golden> g = {
      {0,
       "A child in a pink dress is climbing up a set of stairs in an entry way .",
       {1037, 2775, 1999, 1037, 5061, 4377, 2003, 8218, 2039, 1037, 2275, 1997, 5108, 1999, 2019,
        4443, 2126, 1012}},
      {6,
       "A black dog and a tri-colored dog playing with each other on the road .",
       {1037, 2304, 3899, 1998, 1037, 13012, 1011, 6910, 3899, 2652, 2007, 2169, 2060, 2006, 1996,
        2346, 1012}},
      {984,
       "Young boy with a black \" ADHD \" t-shirt nodding off",
       {2402, 2879, 2007, 1037, 2304, 1000, 4748, 14945, 1000, 1056, 1011, 3797, 11863, 2125}},
      {1627,
       "These men are standing next to a \" Penzance welcomes you \" stone .",
       {2122, 2273, 2024, 3061, 2279, 2000, 1037, 1000, 7279, 13471, 3401, 6160, 2015, 2017, 1000,
        2962, 1012}},
      {2530,
       "A man in a blue shirt and jeans stands behind a sign that says \" Mark ' Mom ' Finley \" .",
       {1037, 2158, 1999, 1037, 2630, 3797, 1998, 6312, 4832,  2369, 1037,
        3696, 2008, 2758, 1000, 2928, 1005, 3566, 1005, 29194, 1000, 1012}},
      {302,
       "A girl holding a horse 's lead behind a fire .",
       {1037, 2611, 3173, 1037, 3586, 1005, 1055, 2599, 2369, 1037, 2543, 1012}},
      {433,
       "three people on four wheel ATV 's in a field .",
       {2093, 2111, 2006, 2176, 5217, 29108, 1005, 1055, 1999, 1037, 2492, 1012}},
      {7905,
       "A football player is in a red and white uniform Sooners # 28 .",
       {1037, 2374, 2447, 2003, 1999, 1037, 2417, 1998, 2317, 6375, 10076, 2015, 1001, 2654, 1012}},
      {12641,
       "A black greyhound , with a green and white jersey ( # 7 ) is running on a track .",
       {1037, 2304, 21220, 1010, 2007, 1037, 2665, 1998, 2317, 3933,
        1006, 1001, 1021,  1007, 2003, 2770, 2006, 1037, 2650, 1012}},
      {7699,
       "A man wearing a white shirt is wearing an at&t headphone at a game .",
       {1037, 2158, 4147, 1037, 2317, 3797, 2003, 4147, 2019, 2012, 1004, 1056, 2132, 9864, 2012,
        1037, 2208, 1012}},
      {22544,
       "A snowboarder makes a jump and does a trick with his pink , blue & black board .",
       {1037, 4586, 6277, 2121, 3084, 1037, 5376, 1998, 2515, 1037,
        7577, 2007, 2010, 5061, 1010, 2630, 1004, 2304, 2604, 1012}},
      {18800,
       "A man and a woman wearing costume glasses ( with attached eyebrows , nose , and moustache "
       ") and holding cigars .",
       {1037, 2158, 1998, 1037, 2450,  4147,  9427, 7877, 1006, 2007,  4987, 8407, 1010,
        4451, 1010, 1998, 9587, 19966, 15395, 1007, 1998, 3173, 19135, 2015, 1012}},
      {22219,
       "two young children RIF=ding sleds down the snow .",
       {2048, 2402, 2336, 15544, 2546, 1027, 22033, 22889, 2098, 2015, 2091, 1996, 4586, 1012}},
      {1952,
       "Two men are standing : one has body modifications and the other is wearing a hat .",
       {2048, 2273, 2024, 3061, 1024, 2028, 2038, 2303, 12719, 1998, 1996, 2060, 2003, 4147, 1037,
        6045, 1012}},
      {9272,
       "A man walks under a bridge and reads grafitti that reads \" WHERE ARE YOU \" ?",
       {1037, 2158, 7365, 2104, 1037, 2958, 1998, 9631, 22160, 12474, 2072, 2008, 9631, 1000, 2073,
        2024, 2017, 1000, 1029}},
      {9273,
       "A man with a cigerette walks past graffitti which says \" Where are you ? \"",
       {1037, 2158, 2007, 1037, 25022, 4590, 7585, 7365, 2627, 22160,
        8873, 6916, 2029, 2758, 1000,  2073, 2024, 2017, 1029, 1000}},
      {3542,
       "A little red-headed boy plays Whack Em !",
       {1037, 2210, 2417, 1011, 3753, 2879, 3248, 1059, 3270, 3600, 7861, 999}},
      {269,
       "The young boy pedals quickly at a BMX race .",
       {1996, 2402, 2879, 15749, 2015, 2855, 2012, 1037, 1038, 22984, 2679, 1012}},
      {17407,
       "A salt-and-pepper-haired man with beard and glasses wearing black sits on the grass .",
       {1037,  5474, 1011, 1998, 1011, 11565, 1011, 10681, 2158, 2007,
        10154, 1998, 7877, 4147, 2304, 7719,  2006, 1996,  5568, 1012}},
      {23680,
       "A man is placing jewelry on an extravagantly-haired and decorated female sculpture or "
       "stiffly-posed woman .",
       {1037, 2158, 2003, 6885, 11912, 2006,  2019, 27856, 2135, 1011, 10681,
        1998, 7429, 2931, 6743, 2030,  27499, 1011, 13686, 2450, 1012}},
      {13075,
       "A Budweiser-sponsored race car accelerates quickly with smoke behind it .",
       {1037, 13007, 19845, 8043, 1011, 6485, 2679, 2482, 23306, 2015, 2855, 2007, 5610, 2369, 2009,
        1012}},
      {7014,
       "An African-American man wearing a green sweatshirt and blue vest is holding up 2 dollar "
       "bills in front of his face , while standing on a busy sidewalk in front of a group of men "
       "playing instruments .",
       {2019, 3060,  1011, 2137, 2158, 4147, 1037, 2665, 28095, 1998, 2630, 17447, 2003, 3173,
        2039, 1016,  7922, 8236, 1999, 2392, 1997, 2010, 2227,  1010, 2096, 3061,  2006, 1037,
        5697, 11996, 1999, 2392, 1997, 1037, 2177, 1997, 2273,  2652, 5693, 1012}},
      {1975,
       "A crowd is watching 2 shirtless men , one in yellow pants and one in black shorts perfom .",
       {1037, 4306, 2003, 3666, 1016, 3797, 3238, 2273, 1010,  2028, 1999,
        3756, 6471, 1998, 2028, 1999, 2304, 9132, 2566, 14876, 2213, 1012}},
      {1035,
       "About 12 kids and a few adults get splashed by an off camera source .",
       {2055, 2260, 4268, 1998, 1037, 2261, 6001, 2131, 22055, 2011, 2019, 2125, 4950, 3120, 1012}},
      {7504,
       "Sombody has stuck the face of Groucho Marx on a walk do n't walk button .",
       {2061,  13344, 5149, 2038, 5881, 1996, 2227, 1997, 24665, 7140, 9905,
        13518, 2006,  1037, 3328, 2079, 1050, 1005, 1056, 3328,  6462, 1012}},
      {20661,
       "A man is setting up a camera to take shots of something that ca n't be seen near a ZCHTV "
       "wall .",
       {1037, 2158, 2003, 4292, 2039, 1037, 4950, 2000, 2202, 7171,  1997, 2242, 2008,
        6187, 1050, 1005, 1056, 2022, 2464, 2379, 1037, 1062, 10143, 2615, 2813, 1012}},
      {27523,
       "A man with brown hair and a five o'clock shadow is wearing sunglasses and sitting at a "
       "table with cans of soda and other drinks .",
       {1037,  2158, 2007, 2829, 2606, 1998, 1037, 2274,  1051, 1005,  5119, 5192, 2003, 4147,
        17072, 1998, 3564, 2012, 1037, 2795, 2007, 18484, 1997, 14904, 1998, 2060, 8974, 1012}},
      {34865,
       "A boy is riding a dolly passed two 1950s cars .",
       {1037, 2879, 2003, 5559, 1037, 19958, 2979, 2048, 4856, 3765, 1012}},
  };
  return g;
}

TEST(Tokenizer, GoldenCaptions) {
  const auto& tok = bert();
  const auto& all = captions();
  ASSERT_GE(golden().size(), 20u);
  for (const auto& g : golden()) {
    SCOPED_TRACE("caption " + std::to_string(g.index) + ": " + g.text);
    ASSERT_LT(g.index, all.size());
    EXPECT_EQ(all[g.index], g.text) << "captions.json changed";
    EXPECT_EQ(tok.tokenize_ids(g.text), g.ids);
    Ids expect = {101};
    expect.insert(expect.end(), g.ids.begin(), g.ids.begin() + std::min<size_t>(g.ids.size(), 28));
    expect.push_back(102);
    EXPECT_EQ(tok.encode(g.text, 30), expect);
  }
  EXPECT_EQ(tok.tokenize("A Budweiser-sponsored race car accelerates quickly ."),
            (Pieces{"a", "bud", "##wei", "##ser", "-", "sponsored", "race", "car", "accelerate",
                    "##s", "quickly", "."}));
}

TEST(Tokenizer, AccentsAndCase) {
  const auto& tok = bert();
  EXPECT_EQ(tok.tokenize("Caf\xC3\xA9 R\xC3\xA9sum\xC3\xA9"), (Pieces{"cafe", "resume"}));
  EXPECT_EQ(tok.tokenize("Cafe\xCC\x81"), (Pieces{"cafe"}));  // decomposed e + U+0301
  EXPECT_EQ(tok.tokenize("na\xC3\xAFve co\xC3\xB6perate"), (Pieces{"naive", "cooperate"}));
  EXPECT_EQ(tok.tokenize("THE DOG"), (Pieces{"the", "dog"}));
  // Full case mapping like Python's str.lower(): U+0130 -> "i" + U+0307 (stripped), and a
  // word-final capital sigma becomes final sigma U+03C2 ("##ος", not "##οσ").
  EXPECT_EQ(tok.tokenize("\xC4\xB0stanbul"), (Pieces{"istanbul"}));
  EXPECT_EQ(tok.tokenize("\xCE\x9F\xCE\x94\xCE\x9F\xCE\xA3"),
            (Pieces{"\xCE\xBF", "##\xCE\xB4", "##\xCE\xBF\xCF\x82"}));
  // NFD splits a precomposed Hangul syllable into conjoining jamo.
  EXPECT_EQ(tok.tokenize("\xEA\xB0\x80"), (Pieces{"\xE1\x84\x80", "##\xE1\x85\xA1"}));
}

TEST(Tokenizer, PunctuationSplitting) {
  const auto& tok = bert();
  EXPECT_EQ(tok.tokenize("hello,world!"), (Pieces{"hello", ",", "world", "!"}));
  EXPECT_EQ(tok.tokenize("$5^`"), (Pieces{"$", "5", "^", "`"}));  // ASCII symbols count too
  EXPECT_EQ(tok.tokenize("dog\xE2\x80\x94"
                         "cat"),
            (Pieces{"dog", "\xE2\x80\x94", "cat"}));
  EXPECT_EQ(tok.tokenize("\xC2\xABhi\xC2\xBB"), (Pieces{"\xC2\xAB", "hi", "\xC2\xBB"}));
}

TEST(Tokenizer, ControlAndWhitespace) {
  const auto& tok = bert();
  EXPECT_EQ(tok.tokenize("a\x01"
                         "b\x7F"
                         "c"),
            (Pieces{"abc"}));  // deleted, not split
  EXPECT_EQ(tok.tokenize(std::string("do\0g", 4)), (Pieces{"dog"}));
  EXPECT_EQ(tok.tokenize("do\xEF\xBF\xBDg"), (Pieces{"dog"}));    // U+FFFD
  EXPECT_EQ(tok.tokenize("dog\xE2\x80\x8Bs"), (Pieces{"dogs"}));  // U+200B (Cf)
  EXPECT_EQ(tok.tokenize("do\xEE\x80\x80g"), (Pieces{"dog"}));    // U+E000 (Co), as HF
  EXPECT_EQ(tok.tokenize("a\tb\nc\rd"), (Pieces{"a", "b", "c", "d"}));
  EXPECT_EQ(tok.tokenize("dog\xE2\x80\xA8"
                         "cat"),
            (Pieces{"dog", "cat"}));                                   // U+2028
  EXPECT_TRUE(tok.tokenize(" \t\n\r\xE3\x80\x80\xC2\xA0  ").empty());  // U+3000, U+00A0
  EXPECT_TRUE(tok.tokenize("").empty());
  EXPECT_TRUE(tok.tokenize_ids("   ").empty());
  EXPECT_EQ(tok.encode("", 5), (Ids{101, 102}));
}

TEST(Tokenizer, CjkPadding) {
  const auto& tok = bert();
  const char* zhong = "\xE4\xB8\xAD";  // U+4E2D
  const char* guo = "\xE5\x9B\xBD";    // U+56FD
  const char* ren = "\xE4\xBA\xBA";    // U+4EBA
  EXPECT_EQ(tok.tokenize(std::string(zhong) + guo + ren), (Pieces{zhong, guo, ren}));
  EXPECT_EQ(tok.tokenize(std::string("ab") + zhong + "cd"), (Pieces{"ab", zhong, "cd"}));
}

TEST(Tokenizer, UnknownWords) {
  const auto& tok = bert();
  EXPECT_EQ(tok.tokenize(std::string(101, 'a')), (Pieces{"[UNK]"}));
  const Pieces hundred = tok.tokenize(std::string(100, 'a'));  // exactly at the limit: split
  ASSERT_EQ(hundred.size(), 50u);
  EXPECT_EQ(hundred.front(), "aaa");
  EXPECT_EQ(hundred.back(), "##a");
  // 101 code points of 2 bytes each: the limit counts characters, not bytes.
  std::string long_word;
  for (int k = 0; k < 101; ++k) long_word += "\xC3\xA9";
  EXPECT_EQ(tok.tokenize("x " + long_word + " y"), (Pieces{"x", "[UNK]", "y"}));
  // A word with a character that is in no piece is one [UNK], not a partial match.
  EXPECT_EQ(tok.tokenize("dog\xE2\x98\x83"), (Pieces{"[UNK]"}));  // U+2603 snowman
  EXPECT_EQ(tok.tokenize("big dog\xE2\x98\x83 runs"), (Pieces{"big", "[UNK]", "runs"}));
  EXPECT_EQ(tok.tokenize_ids("big dog\xE2\x98\x83 runs"), (Ids{2502, 100, 3216}));
}

TEST(Tokenizer, EncodeTruncation) {
  const auto& tok = bert();
  const Golden& g = golden()[21];  // caption 7014: 40 pieces
  ASSERT_EQ(g.index, 7014u);
  ASSERT_EQ(g.ids.size(), 40u);
  for (size_t max_len : {2, 3, 10, 30, 41, 42, 43, 512}) {
    SCOPED_TRACE(max_len);
    const Ids e = tok.encode(g.text, max_len);
    const size_t n = std::min<size_t>(g.ids.size(), max_len - 2);
    ASSERT_EQ(e.size(), n + 2);
    EXPECT_LE(e.size(), max_len);
    EXPECT_EQ(e.front(), tok.cls_id());
    EXPECT_EQ(e.back(), tok.sep_id());
    EXPECT_TRUE(std::equal(g.ids.begin(), g.ids.begin() + n, e.begin() + 1));
  }
  // Truncation through the non-ASCII path too.
  const Ids u = tok.encode("caf\xC3\xA9 caf\xC3\xA9 caf\xC3\xA9 caf\xC3\xA9", 4);
  EXPECT_EQ(u, (Ids{101, 7668, 7668, 102}));
  EXPECT_THROW(tok.encode("a dog", 1), fnvlp::Error);
  EXPECT_THROW(tok.encode("a dog", 0), fnvlp::Error);
}

TEST(Utf8, Valid) {
  EXPECT_TRUE(is_valid_utf8(""));
  EXPECT_TRUE(is_valid_utf8("plain ascii, longer than eight bytes"));
  EXPECT_TRUE(is_valid_utf8(std::string("nul\0inside", 10)));
  EXPECT_TRUE(is_valid_utf8("\xC3\xA9"));          // U+00E9
  EXPECT_TRUE(is_valid_utf8("\xC2\x80"));          // U+0080, smallest 2-byte
  EXPECT_TRUE(is_valid_utf8("\xE0\xA0\x80"));      // U+0800, smallest 3-byte
  EXPECT_TRUE(is_valid_utf8("\xE4\xB8\xAD"));      // U+4E2D
  EXPECT_TRUE(is_valid_utf8("\xED\x9F\xBF"));      // U+D7FF, just below the surrogates
  EXPECT_TRUE(is_valid_utf8("\xEE\x80\x80"));      // U+E000, just above them
  EXPECT_TRUE(is_valid_utf8("\xF0\x90\x80\x80"));  // U+10000, smallest 4-byte
  EXPECT_TRUE(is_valid_utf8("\xF0\x9F\x98\x80"));  // U+1F600
  EXPECT_TRUE(is_valid_utf8("\xF4\x8F\xBF\xBF"));  // U+10FFFF
  EXPECT_TRUE(is_valid_utf8("mixed \xC3\xA9t\xC3\xA9 \xE4\xB8\xAD text \xF0\x9F\x98\x80!"));
}

TEST(Utf8, Invalid) {
  const std::vector<std::pair<const char*, std::string>> bad = {
      {"overlong 2-byte '/'", "\xC0\xAF"},
      {"overlong 2-byte C1", "\xC1\xBF"},
      {"overlong 3-byte", "\xE0\x80\xAF"},
      {"overlong 3-byte U+07FF", "\xE0\x9F\xBF"},
      {"overlong 4-byte", "\xF0\x80\x80\xAF"},
      {"overlong 4-byte U+FFFF", "\xF0\x8F\xBF\xBF"},
      {"surrogate U+D800", "\xED\xA0\x80"},
      {"surrogate U+DFFF", "\xED\xBF\xBF"},
      {"above U+10FFFF", "\xF4\x90\x80\x80"},
      {"F5 lead", "\xF5\x80\x80\x80"},
      {"byte FF", "\xFF"},
      {"byte FE", "\xFE"},
      {"stray continuation", "\x80"},
      {"truncated 2-byte", "\xC3"},
      {"truncated 3-byte", "\xE4\xB8"},
      {"truncated 4-byte", "\xF0\x9F\x98"},
      {"truncated after ascii", "abc\xE4"},
      {"bad continuation", "\xC3\x28"},
      {"bad 3rd byte", "\xE4\xB8\x28"},
      {"bad 4th byte", "\xF0\x9F\x98\x28"},
      {"FF after long ascii run", std::string(21, 'a') + "\xFF" + "bbb"},
  };
  for (const auto& [what, s] : bad) EXPECT_FALSE(is_valid_utf8(s)) << what;
}

TEST(Tokenizer, RejectsInvalidUtf8) {
  const auto& tok = bert();
  EXPECT_THROW(tok.tokenize("ab\xFF"), fnvlp::Error);
  EXPECT_THROW(tok.tokenize_ids("\xED\xA0\x80"), fnvlp::Error);
  EXPECT_THROW(tok.encode("a dog \xC3", 30), fnvlp::Error);
  // Also when truncation would never reach the bad byte: the precondition is on the whole text.
  EXPECT_THROW(tok.encode("a dog runs \xC0\xAF", 3), fnvlp::Error);
  EXPECT_NE(error_of([&] { tok.tokenize("ab\xFF"); }).find("UTF-8"), std::string::npos);
}

const char* kSmallVocab = "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nplay\n##ing\na\n##b\n";

TEST(Tokenizer, SmallVocabulary) {
  const std::string path = write_temp("small.txt", kSmallVocab);
  const auto tok = WordPieceTokenizer::from_file(path);
  EXPECT_EQ(tok.size(), 9u);
  EXPECT_EQ(tok.unk_id(), 1);
  EXPECT_EQ(tok.mask_id(), 4);
  // sha256 computed independently with Python's hashlib.
  EXPECT_EQ(tok.vocab_sha256(), "34fca435226d951c94c4359d08f91ebf97005aa04214076bd7de3ba8c8436128");
  EXPECT_EQ(tok.tokenize("Playing ab x ."),
            (Pieces{"play", "##ing", "a", "##b", "[UNK]", "[UNK]"}));
  EXPECT_EQ(tok.encode("playing", 10), (Ids{2, 5, 6, 3}));
  // No trailing newline: the last line is still a token.
  const auto tok2 =
      WordPieceTokenizer::from_file(write_temp("nonl.txt", "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]"));
  EXPECT_EQ(tok2.size(), 5u);
  EXPECT_EQ(tok2.id("[MASK]"), 4);
  // Copies share the vocabulary and outlive the original.
  auto copy = std::make_unique<WordPieceTokenizer>(tok);
  {
    WordPieceTokenizer moved = std::move(*copy);
    copy.reset();
    EXPECT_EQ(moved.tokenize_ids("playing"), (Ids{5, 6}));
  }
  std::remove(path.c_str());
}

TEST(Tokenizer, LoadErrorsNameTheFile) {
  const std::string missing = ::testing::TempDir() + "fnvlp_tok_does_not_exist.txt";
  EXPECT_NE(error_of([&] { WordPieceTokenizer::from_file(missing); }).find(missing),
            std::string::npos);

  const std::string dir = ::testing::TempDir();  // the vocabulary's folder instead of its file
  const std::string dir_msg = error_of([&] { WordPieceTokenizer::from_file(dir); });
  EXPECT_NE(dir_msg.find(dir + " is a directory"), std::string::npos) << dir_msg;

  const std::string empty = write_temp("empty.txt", "");
  EXPECT_NE(error_of([&] { WordPieceTokenizer::from_file(empty); }).find(empty), std::string::npos);

  const std::string dup = write_temp("dup.txt", "[PAD]\n[UNK]\n[PAD]\n[CLS]\n[SEP]\n[MASK]\n");
  const std::string dup_msg = error_of([&] { WordPieceTokenizer::from_file(dup); });
  EXPECT_NE(dup_msg.find(dup + ":3"), std::string::npos) << dup_msg;
  EXPECT_NE(dup_msg.find("duplicate"), std::string::npos) << dup_msg;

  const std::string nomask = write_temp("nomask.txt", "[PAD]\n[UNK]\n[CLS]\n[SEP]\nthe\n");
  const std::string nomask_msg = error_of([&] { WordPieceTokenizer::from_file(nomask); });
  EXPECT_NE(nomask_msg.find(nomask), std::string::npos) << nomask_msg;
  EXPECT_NE(nomask_msg.find("[MASK]"), std::string::npos) << nomask_msg;

  const std::string blank = write_temp("blank.txt", "[PAD]\n[UNK]\n\n[CLS]\n[SEP]\n[MASK]\n");
  EXPECT_NE(error_of([&] { WordPieceTokenizer::from_file(blank); }).find(blank + ":3"),
            std::string::npos);
  const std::string crlf = write_temp("crlf.txt", "[PAD]\r\n[UNK]\r\n[CLS]\r\n[SEP]\r\n[MASK]\r\n");
  EXPECT_NE(error_of([&] { WordPieceTokenizer::from_file(crlf); }).find(crlf + ":1"),
            std::string::npos);
  const std::string badutf = write_temp("badutf.txt", "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n\xFF\n");
  EXPECT_NE(error_of([&] { WordPieceTokenizer::from_file(badutf); }).find(badutf + ":6"),
            std::string::npos);
  for (const auto& p : {empty, dup, nomask, blank, crlf, badutf}) std::remove(p.c_str());
}

TEST(Tokenizer, ConcurrentCallsAgree) {
  const auto& tok = bert();
  const auto& all = captions();
  const size_t n = std::min<size_t>(all.size(), 4000);
  std::vector<Ids> a(n), b(n);
  std::thread t([&] {
    for (size_t i = 0; i < n; ++i) a[i] = tok.encode(all[i], 30);
  });
  for (size_t i = 0; i < n; ++i) b[i] = tok.encode(all[i], 30);
  t.join();
  EXPECT_EQ(a, b);
}

// The whole data set against the independent Python implementation (one line of ids per
// caption, from `wordpiece.py --captions ... --max-len 30`).
TEST(Tokenizer, AgreesWithPythonReferenceOnAllCaptions) {
  if (access(kPython, X_OK) != 0) GTEST_SKIP() << kPython << " not found";
  const auto& tok = bert();
  const auto& all = captions();
  ASSERT_EQ(all.size(), 35455u);

  const std::string cmd = std::string(kPython) + " '" + kReference + "' --vocab '" + kVocab +
                          "' --captions '" + kCaptions + "' --max-len 30";
  FILE* pipe = popen(cmd.c_str(), "r");
  ASSERT_NE(pipe, nullptr) << cmd;
  std::string out;
  char buf[1 << 16];
  for (size_t got; (got = fread(buf, 1, sizeof buf, pipe)) > 0;) out.append(buf, got);
  const int status = pclose(pipe);
  ASSERT_EQ(status, 0) << cmd;

  std::vector<Ids> ref;
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream fields(line);
    Ids ids;
    for (int32_t v; fields >> v;) ids.push_back(v);
    ref.push_back(std::move(ids));
  }
  ASSERT_EQ(ref.size(), all.size());

  const auto t0 = std::chrono::steady_clock::now();
  std::vector<Ids> mine(all.size());
  for (size_t i = 0; i < all.size(); ++i) mine[i] = tok.encode(all[i], 30);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  size_t mismatches = 0;
  for (size_t i = 0; i < all.size(); ++i) {
    if (mine[i] == ref[i]) continue;
    if (++mismatches <= 10) {
      ADD_FAILURE() << "caption " << i << " differs from wordpiece.py: \"" << all[i] << "\"";
    }
  }
  EXPECT_EQ(mismatches, 0u);
  std::cout << "[ info ] encoded " << all.size() << " captions in " << secs * 1e3 << " ms ("
            << static_cast<double>(all.size()) / secs << " captions/s)\n";
}

}  // namespace
}  // namespace fnvlp::data
