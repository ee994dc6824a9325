#!/usr/bin/env python3
"""Independent reference for fnvlp's WordPiece tokenizer (bert-base-uncased behaviour).

Written from HuggingFace transformers' BertTokenizer(do_lower_case=True), i.e. BasicTokenizer
followed by WordpieceTokenizer, using only the standard library, so the C++ tokenizer
(src/fnvlp/data/tokenizer.cpp) can be checked against something that shares none of its code.

Steps, in the order HuggingFace applies them:
  1. clean: drop U+0000, U+FFFD and every category C* character except \\t \\n \\r (HuggingFace
     tests cat.startswith("C"); Google's original tested only Cc/Cf); map whitespace to " ".
  2. pad CJK ideographs with spaces; NFC; split on whitespace (str.split()).
  3. per token: str.lower(), NFD, drop category Mn, split off punctuation characters.
  4. greedy longest-match-first WordPiece per word; "##" marks continuation pieces; a word of more
     than 100 code points, or one that cannot be covered completely, becomes [UNK].

Deliberate difference from HuggingFace: special-token strings inside the text ("[MASK]") are not
kept whole (Google's tokenization.py behaviour); they are split like any other text.

Used two ways: imported (class WordPiece) by benchmark scripts, and as a CLI by the C++ unit test:

  wordpiece.py --vocab VOCAB --captions captions.json --max-len 30   # ids of each caption's encode()
  wordpiece.py --vocab VOCAB --jsonl texts.jsonl --max-len 30        # one JSON string per line
  add --tokens to print word pieces (tokenize(), no [CLS]/[SEP]) instead of ids.

Output: one line per input text, space-separated.
"""

import argparse
import functools
import json
import sys
import unicodedata

MAX_CHARS_PER_WORD = 100

# The code point blocks that BERT treats as CJK ideographs (not Hangul, Hiragana or Katakana).
_CJK_BLOCKS = (
    (0x4E00, 0x9FFF),
    (0x3400, 0x4DBF),
    (0x20000, 0x2A6DF),
    (0x2A700, 0x2B73F),
    (0x2B740, 0x2B81F),
    (0x2B820, 0x2CEAF),
    (0xF900, 0xFAFF),
    (0x2F800, 0x2FA1F),
)


def _cjk(ch):
    cp = ord(ch)
    for lo, hi in _CJK_BLOCKS:
        if lo <= cp <= hi:
            return True
    return False


def _space(ch):
    return ch in " \t\n\r" or unicodedata.category(ch) == "Zs"


def _dropped(ch):
    if ch in "\t\n\r":
        return False
    cp = ord(ch)
    return cp == 0 or cp == 0xFFFD or unicodedata.category(ch)[0] == "C"


def _punct(ch):
    cp = ord(ch)
    # BERT counts every ASCII non-alphanumeric printable as punctuation ($, ^, ` included).
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(ch)[0] == "P"


@functools.lru_cache(maxsize=1 << 16)
def _token_words(tok):
    """lower(), NFD, drop Mn, split off punctuation: one whitespace-separated token (cached:
    captions reuse a small set of tokens)."""
    words = []
    cur = ""
    for ch in unicodedata.normalize("NFD", tok.lower()):
        if unicodedata.category(ch) == "Mn":
            continue
        if _punct(ch):
            if cur:
                words.append(cur)
                cur = ""
            words.append(ch)
        else:
            cur += ch
    if cur:
        words.append(cur)
    return tuple(words)


_CLEANED = {}  # character -> what the cleaning step makes of it (memo)


def basic_split(text):
    """BasicTokenizer: the words (before WordPiece) of `text`."""
    buf = []
    for ch in text:
        out = _CLEANED.get(ch)
        if out is None:
            if _dropped(ch):
                out = ""
            elif _space(ch):
                out = " "
            elif _cjk(ch):
                out = " " + ch + " "
            else:
                out = ch
            _CLEANED[ch] = out
        buf.append(out)
    words = []
    for tok in unicodedata.normalize("NFC", "".join(buf)).split():
        words.extend(_token_words(tok))
    # HuggingFace re-splits the joined pieces on whitespace; a piece never holds any here, but
    # keep the step so the two agree even if the definitions above drift.
    return " ".join(words).split()


class WordPiece:
    def __init__(self, vocab_path):
        self.vocab = {}
        with open(vocab_path, "rb") as f:
            lines = f.read().decode("utf-8").split("\n")
        if lines and lines[-1] == "":
            lines.pop()  # the final newline ends the last line, it does not start a token
        for n, tok in enumerate(lines):
            if tok in self.vocab:
                raise ValueError("%s:%d: duplicate token %r" % (vocab_path, n + 1, tok))
            self.vocab[tok] = n
        self.inv = {v: k for k, v in self.vocab.items()}
        self._memo = {}  # word -> ids: captions repeat words a lot
        self.unk = self.vocab["[UNK]"]
        self.cls = self.vocab["[CLS]"]
        self.sep = self.vocab["[SEP]"]
        self.pad = self.vocab["[PAD]"]
        self.mask = self.vocab["[MASK]"]

    def _word_ids(self, word):
        if len(word) > MAX_CHARS_PER_WORD:
            return [self.unk]
        out = []
        i = 0
        while i < len(word):
            j = len(word)
            found = None
            while j > i:
                piece = word[i:j] if i == 0 else "##" + word[i:j]
                found = self.vocab.get(piece)
                if found is not None:
                    break
                j -= 1
            if found is None:
                return [self.unk]
            out.append(found)
            i = j
        return out

    def tokenize_ids(self, text):
        ids = []
        for w in basic_split(text):
            pieces = self._memo.get(w)
            if pieces is None:
                pieces = self._memo[w] = tuple(self._word_ids(w))
            ids.extend(pieces)
        return ids

    def tokenize(self, text):
        return [self.inv[i] for i in self.tokenize_ids(text)]

    def encode(self, text, max_len):
        if max_len < 2:
            raise ValueError("max_len must be >= 2")
        return [self.cls] + self.tokenize_ids(text)[: max_len - 2] + [self.sep]


def _main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--vocab", required=True)
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--captions", help="ALBEF-style JSON list of {'caption': str, ...}")
    src.add_argument("--jsonl", help="one JSON-encoded string per line")
    ap.add_argument("--max-len", type=int, default=30)
    ap.add_argument("--tokens", action="store_true", help="print word pieces, not encode() ids")
    args = ap.parse_args()

    wp = WordPiece(args.vocab)
    if args.captions:
        with open(args.captions, encoding="utf-8") as f:
            texts = [c["caption"] for c in json.load(f)]
    else:
        with open(args.jsonl, encoding="utf-8") as f:
            texts = [json.loads(line) for line in f if line.strip()]
    out = sys.stdout
    for t in texts:
        if args.tokens:
            out.write(" ".join(wp.tokenize(t)) + "\n")
        else:
            out.write(" ".join(str(i) for i in wp.encode(t, args.max_len)) + "\n")


if __name__ == "__main__":
    _main()
