"""Deterministic multi-script jsonl corpus for the cross-check tests (tests/crosscheck/test_*.py).

generate(seed, target_bytes) -> list of records ({"id", "text", "meta", ...}); write_jsonl(records, path, seed)
writes them one per line in a mix of JSON styles (ensure_ascii True/False, '/' escaped as '\\/' as pandas' ujson
does, compact or spaced separators, varying key order). The texts mix many scripts, emoji (ZWJ sequences, flags,
keycaps), digits of several scripts, every kind of whitespace, contractions, '<|endoftext|>' written in the text,
very long words, URLs, combining marks, zero-width characters and empty texts.

Only code points assigned in Unicode 14 (Python 3.11's unicodedata) are used, so that the regex engines of the
reference implementations (Python regex, Rust regex in tiktoken, Oniguruma in tokenizers) agree on their categories.
Run as a script to write a corpus: python corpus.py OUT.jsonl [--seed N] [--mb MB].
"""

import argparse
import json
import os
import random
import struct
import subprocess
import sys
import unicodedata

UNICODE_VERSION = unicodedata.unidata_version

# ---------------------------------------------------------------------------------------------------------------
# Building blocks

ENGLISH_WORDS = (
    "the of and to in is was that for it with as his on be at by had are but from or have an they which one you were "
    "her all she there would their we him been has when who will more no if out so said what up its about into than "
    "them can only other new some could time these two may then do first any my now such like our over man me even "
    "most made after also did many before must through back years where much your way well down should because each "
    "just those people how too little state good very make world still own see men work long get here between both "
    "life being under never day same another know while last might us great old year off come since against go came "
    "right used take three Megatron DeepSpeed tokenizer dataset preprocessing BigScience OSCAR transformer attention "
    "indivisible hasOwnProperty toString constructor valueOf naïve café résumé coöperate façade jalapeño"
).split()

CONTRACTIONS = [
    "it's", "don't", "they're", "we've", "I'm", "you'll", "he'd", "can't", "won't", "she's", "I've", "we'd",
    "DON'T", "IT'S", "THEY'RE", "WE'VE", "I'M", "YOU'LL", "HE'D", "Don'T", "it'S", "o'clock", "rock'n'roll",
    "'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'RE", "'VE", "'M", "'LL", "'D", "''", "'", "'''s",
    "it\u2019s", "don\u2019t", "'x", "'r", "'v", "'l", "'dd", "'sss", "'ree", "'llama", "'mm",
]

PUNCT = list(".,;:!?-\u2014\u2013()[]{}\"'\u2026/\\@#$%^&*_+=<>|~`") + ["...", "?!", "--", "\u00ab", "\u00bb",
                                                                    "\u201c", "\u201d", "\u2018", "\u2019"]

LATIN_DIACRITIC_LETTERS = "àáâãäåæçèéêëìíîïðñòóôõöøùúûüýþÿāăąćčďđēėęěğģīįıķłńņňőœřśşšţťūůűųźżžơưǎǐǒǔșțẞß" \
                          "ÀÁÂÃÄÅÆÇÈÉÊËÌÍÎÏÐÑÒÓÔÕÖØÙÚÛÜÝÞŁŒŠŽẠẢẤẦẨẪẬắằẳẵặẹẻẽếềểễệ"
LATIN_BASE = "abcdefghijklmnopqrstuvwxyz"
CYRILLIC = "абвгдеёжзийклмнопрстуфхцчшщъыьэюяАБВГДЕЁЖЗИЙКЛМНОПРСТУФХЦЧШЩЪЫЬЭЮЯіїєґўІЇЄҐЎ"
GREEK = "αβγδεζηθικλμνξοπρστυφχψωςάέήίόύώϊϋΐΰΑΒΓΔΕΖΗΘΙΚΛΜΝΞΟΠΡΣΤΥΦΧΨΩ"
ARABIC = "ابتثجحخدذرزسشصضطظعغفقكلمنهويءآأؤإئىةپچژکگی"
ARABIC_MARKS = "\u064b\u064c\u064d\u064e\u064f\u0650\u0651\u0652\u0670"
ARABIC_PUNCT = ["\u060c", "\u061b", "\u061f", "\u06d4", "\u066a", "\u0640"]  # ، ؛ ؟ ۔ ٪ tatweel (Lm)
HEBREW = "אבגדהוזחטיכךלמםנןסעפףצץקרשת"
HEBREW_MARKS = "\u05b0\u05b4\u05b7\u05b8\u05bc\u05c1\u05c2"
DEVANAGARI_CONS = "कखगघङचछजझञटठडढणतथदधनपफबभमयरलवशषसहक़ख़ग़ज़ड़ढ़फ़"
DEVANAGARI_VOWELS = "अआइईउऊऋएऐओऔ"
DEVANAGARI_MATRAS = "\u093e\u093f\u0940\u0941\u0942\u0943\u0947\u0948\u094b\u094c\u0902\u0901\u0903\u094d"
THAI = "กขฃคฅฆงจฉชซฌญฎฏฐฑฒณดตถทธนบปผฝพฟภมยรลวศษสหฬอฮ"
THAI_MARKS = "\u0e31\u0e34\u0e35\u0e36\u0e37\u0e38\u0e39\u0e47\u0e48\u0e49\u0e4a\u0e4b\u0e4c"
THAI_VOWELS = "ะาำเแโใไ"
CJK_PUNCT = ["\u3002", "\uff0c", "\u3001", "\uff01", "\uff1f", "\u300c", "\u300d", "\u300e", "\u300f", "\uff08",
             "\uff09", "\u30fb", "\u301c"]
KANA = "あいうえおかきくけこさしすせそたちつてとなにぬねのはひふへほまみむめもやゆよらりるれろわをんがぎぐげご" \
       "アイウエオカキクケコサシスセソタチツテトナニヌネノハヒフヘホマミムメモヤユヨラリルレロワヲンーッャュョ"

DIGIT_SETS = [
    "0123456789",
    "\u0660\u0661\u0662\u0663\u0664\u0665\u0666\u0667\u0668\u0669",  # Arabic-Indic
    "\u06f0\u06f1\u06f2\u06f3\u06f4\u06f5\u06f6\u06f7\u06f8\u06f9",  # Extended Arabic-Indic
    "\u0966\u0967\u0968\u0969\u096a\u096b\u096c\u096d\u096e\u096f",  # Devanagari
    "\u0e50\u0e51\u0e52\u0e53\u0e54\u0e55\u0e56\u0e57\u0e58\u0e59",  # Thai
    "\uff10\uff11\uff12\uff13\uff14\uff15\uff16\uff17\uff18\uff19",  # fullwidth
    "\U0001d7ce\U0001d7cf\U0001d7d0\U0001d7d1\U0001d7d2",             # mathematical bold digits
]
OTHER_NUMBERS = ["\u00b2", "\u00b3", "\u00b9", "\u00bd", "\u00bc", "\u2153", "\u2160", "\u2161", "\u216b", "\u2460",
                 "\u2461", "\u3007", "\u4e00", "\u5341", "\u2070", "\u2079", "\u2089"]  # No, Nl (Ⅻ, 〇), CJK

WHITESPACE = [" ", "  ", "   ", "    ", "\t", "\t\t", " \t", "\n", "\n\n", "\n\n\n", "\r\n", "\r", "\r\n\r\n", " \n",
              "\n ", "\u00a0", "\u00a0\u00a0", " \u00a0", "\u2003", "\u2002", "\u2009", "\u200a", "\u3000",
              "\u3000\u3000", "\u0085", "\u2028", "\u2029", "\u1680", "\u202f", "\u205f", "\x0b", "\x0c",
              " \u3000 ", "\t \n \u00a0", "\x1c", "\x1d", "\x1e", "\x1f"]  # U+001C-001F: isspace, not White_Space
ZERO_WIDTH = ["\u200b", "\u200c", "\u200d", "\u2060", "\ufeff", "\u00ad", "\u200e", "\u200f", "\u034f"]
COMBINING = ["\u0300", "\u0301", "\u0302", "\u0303", "\u0308", "\u030a", "\u0327", "\u0328", "\u0331", "\u20dd",
             "\u0489", "\u1ab0", "\u1dc0", "\ufe20"]

EMOJI = ["\U0001F600", "\U0001F602", "\U0001F44B", "\U0001F30D", "\U0001F680", "\u2764\ufe0f", "\u2600", "\u2705",
         "\U0001F44D\U0001F3FD", "\U0001F469\U0001F3FF", "\U0001F9D1\u200d\U0001F4BB",
         "\U0001F468\u200d\U0001F469\u200d\U0001F467\u200d\U0001F466", "\U0001F3F3\ufe0f\u200d\U0001F308",
         "\U0001F469\u200d\u2764\ufe0f\u200d\U0001F48B\u200d\U0001F468", "\U0001F441\ufe0f\u200d\U0001F5E8\ufe0f",
         "\U0001F1FA\U0001F1F8", "\U0001F1EB\U0001F1F7", "\U0001F1EF\U0001F1F5", "\U0001F1EE\U0001F1F3",
         "\U0001F3F4\U000E0067\U000E0062\U000E0065\U000E006E\U000E0067\U000E007F",  # England tag sequence
         "1\ufe0f\u20e3", "#\ufe0f\u20e3", "*\u20e3", "\u00a9\ufe0f", "\u2122", "\U0001F9EC", "\U0001FAE0",
         "\U0001F004", "\U0001F0CF", "\u231a", "\u2b50"]

SYMBOLS = ["\u20ac", "\u00a3", "\u00a5", "\u20b9", "\u20bd", "$", "\u00b0", "\u00b1", "\u00d7", "\u00f7", "\u2211",
           "\u221e", "\u2248", "\u2260", "\u2264", "\u2265", "\u2192", "\u21d2", "\u2500", "\u2502", "\u2588",
           "\u25cf", "\u2605", "\u266b", "\u00a7", "\u00b6", "\u2020", "\u2030", "\u2116", "\u2103", "\u00b5"]

URL_PARTS = ["https://", "http://", "ftp://", "www.", "example.com", "huggingface.co", "github.com/", "arxiv.org/abs/",
             "bigscience-workshop/Megatron-DeepSpeed", "/blob/main/tools/preprocess_data.py", "?q=a+b&lang=en",
             "#L80-L120", "/", "//", "index.html", "%20", "%E2%9C%93", ":8080", "/~user/", "file:///tmp/x.jsonl",
             "C:\\Users\\x\\data.json", "../shared/data/gpt2/vocab.bpe", "\u00e9t\u00e9/\u043f\u0443\u0442\u044c"]

SPECIAL_TEXT = ["<|endoftext|>", "<|endoftext|><|endoftext|>", "<|endoftext|>\n", " <|endoftext|> ", "<|endoftext",
                "|endoftext|>", "<|ENDOFTEXT|>", "<s>", "</s>", "<pad>", "<unk>", "</s></s>", "<s >", "< /s>"]


def _cp_is_assigned(c):
    return unicodedata.category(c) not in ("Cn", "Cs")


def _assigned_range(lo, hi):
    return [chr(c) for c in range(lo, hi + 1) if _cp_is_assigned(chr(c))]


# Random code points from many blocks (assigned in this Python's Unicode only).
RANDOM_POOL = (_assigned_range(0x00A0, 0x024F) + _assigned_range(0x0370, 0x0CFF) + _assigned_range(0x0E00, 0x0FFF)
               + _assigned_range(0x1000, 0x1FFF) + _assigned_range(0x2000, 0x2BFF) + _assigned_range(0x2E80, 0x33FF)
               + _assigned_range(0xA000, 0xABFF) + _assigned_range(0xFB00, 0xFFFD)
               + _assigned_range(0x10000, 0x1034F) + _assigned_range(0x1D400, 0x1D7FF)
               + _assigned_range(0x1F000, 0x1FAFF) + _assigned_range(0x20000, 0x2004F)
               + ["\ue000", "\uf8ff", "\U000F0000"])  # private use (Co) too


# ---------------------------------------------------------------------------------------------------------------
# Text generators


class _Gen:
    def __init__(self, rng):
        self.r = rng
        self.kind_counter = 0

    def pick(self, seq):
        return seq[self.r.randrange(len(seq))]

    def word_from(self, letters, lo=1, hi=9):
        return "".join(self.pick(letters) for _ in range(self.r.randint(lo, hi)))

    def words(self, make, n, sep=" "):
        return sep.join(make() for _ in range(n))

    # --- scripts
    def english(self):
        r = self.r
        out = []
        for _ in range(r.randint(1, 6)):
            ws = []
            for i in range(r.randint(3, 18)):
                x = r.random()
                if x < 0.08:
                    w = self.pick(CONTRACTIONS)
                elif x < 0.12:
                    w = str(r.randint(0, 10 ** r.randint(1, 12)))
                elif x < 0.14:
                    w = f"{r.randint(0, 999)}.{r.randint(0, 99)}"
                elif x < 0.17:
                    w = self.pick(ENGLISH_WORDS).upper()
                else:
                    w = self.pick(ENGLISH_WORDS)
                if i == 0:
                    w = w[:1].upper() + w[1:]
                if r.random() < 0.08:
                    w = w + self.pick(PUNCT)
                if r.random() < 0.03:
                    w = '"' + w + '"'
                ws.append(w)
            out.append(" ".join(ws) + self.pick([".", ".", ".", "!", "?", "...", ":", ";", "", ".\u201d"]))
        return " ".join(out)

    def latin(self):
        def word():
            w = self.word_from(LATIN_BASE + LATIN_DIACRITIC_LETTERS * 2, 2, 10)
            if self.r.random() < 0.3:  # decomposed form: base + combining mark
                w = unicodedata.normalize("NFD", w)
            if self.r.random() < 0.15:
                w = w.capitalize()
            return w
        return self.words(word, self.r.randint(3, 25))

    def cyrillic(self):
        return self.words(lambda: self.word_from(CYRILLIC, 1, 12), self.r.randint(3, 25)) + self.pick(["", ".", "!"])

    def greek(self):
        return self.words(lambda: self.word_from(GREEK, 1, 10), self.r.randint(3, 20)) + self.pick(["", ".", ";", "\u0387"])

    def arabic(self):
        def word():
            w = self.word_from(ARABIC, 2, 8)
            if self.r.random() < 0.3:
                w = "".join(c + (self.pick(ARABIC_MARKS) if self.r.random() < 0.4 else "") for c in w)
            if self.r.random() < 0.1:
                w += self.pick(ARABIC_PUNCT)
            if self.r.random() < 0.1:
                w = self.number(DIGIT_SETS[self.r.choice([1, 2])])
            return w
        return self.words(word, self.r.randint(3, 20))

    def hebrew(self):
        def word():
            w = self.word_from(HEBREW, 2, 7)
            if self.r.random() < 0.3:
                w = "".join(c + (self.pick(HEBREW_MARKS) if self.r.random() < 0.5 else "") for c in w)
            return w
        return self.words(word, self.r.randint(3, 18)) + self.pick(["", ".", "\u05c3"])

    def devanagari(self):
        def word():
            s = []
            if self.r.random() < 0.3:
                s.append(self.pick(DEVANAGARI_VOWELS))
            for _ in range(self.r.randint(1, 5)):
                s.append(self.pick(DEVANAGARI_CONS))
                if self.r.random() < 0.6:
                    s.append(self.pick(DEVANAGARI_MATRAS))
            w = "".join(s)
            if self.r.random() < 0.08:
                w = self.number(DIGIT_SETS[3])
            return w
        return self.words(word, self.r.randint(3, 18)) + self.pick([" \u0964", "\u0964", "\u0965", ""])

    def thai(self):
        s = []
        for _ in range(self.r.randint(5, 60)):
            if self.r.random() < 0.2:
                s.append(self.pick(THAI_VOWELS))
            s.append(self.pick(THAI))
            if self.r.random() < 0.4:
                s.append(self.pick(THAI_MARKS))
            if self.r.random() < 0.05:
                s.append(" ")
            if self.r.random() < 0.03:
                s.append(self.number(DIGIT_SETS[4]))
        return "".join(s)

    def cjk(self):
        s = []
        for _ in range(self.r.randint(5, 80)):
            x = self.r.random()
            if x < 0.6:
                s.append(chr(self.r.randint(0x4E00, 0x9FFF)))
            elif x < 0.75:
                s.append(self.pick(KANA))
            elif x < 0.85:
                s.append(self.pick(CJK_PUNCT))
            elif x < 0.88:
                s.append(chr(self.r.randint(0x3400, 0x4DBF)))
            elif x < 0.89:
                s.append(chr(self.r.randint(0x20000, 0x2A6DF)))
            elif x < 0.92:
                s.append(self.number(self.pick(DIGIT_SETS[:1] + DIGIT_SETS[5:6])))
            elif x < 0.95:
                s.append("\u3000")
            else:
                s.append(self.english()[:20])
        return "".join(s)

    def hangul(self):
        def word():
            return "".join(chr(self.r.randint(0xAC00, 0xD7A3)) for _ in range(self.r.randint(1, 5)))
        return self.words(word, self.r.randint(2, 15)) + self.pick(["", ".", "?"])

    def emoji(self):
        s = []
        for _ in range(self.r.randint(1, 12)):
            s.append(self.pick(EMOJI))
            if self.r.random() < 0.4:
                s.append(self.pick([" ", "", "", " and ", "!", "\u200d", "\ufe0f", " "]))
        return "".join(s)

    def number(self, digits=None):
        digits = digits or self.pick(DIGIT_SETS)
        n = self.r.choice([1, 1, 2, 3, 4, 5, 7, 10, 16, 40])
        s = "".join(self.pick(digits) for _ in range(n))
        if self.r.random() < 0.2:
            s += self.pick([".", ",", "\u066b", "\u066c", "e-", "%", "x"]) + "".join(self.pick(digits) for _ in range(3))
        return s

    def numbers(self):
        s = []
        for _ in range(self.r.randint(1, 10)):
            x = self.r.random()
            s.append(self.number() if x < 0.7 else self.pick(OTHER_NUMBERS) * self.r.randint(1, 3))
            s.append(self.pick([" ", " ", "", ", ", "-", "/", "\u00a0", "+", "\n"]))
        return "".join(s)

    def whitespace(self):
        return "".join(self.pick(WHITESPACE) for _ in range(self.r.randint(1, 5)))

    def url(self):
        return "".join(self.pick(URL_PARTS) for _ in range(self.r.randint(2, 7)))

    def combining(self):
        s = []
        for _ in range(self.r.randint(1, 10)):
            s.append(self.pick(LATIN_BASE + GREEK + CYRILLIC + " 0123456789.!"))
            for _ in range(self.r.choice([0, 1, 1, 2, 3, 8])):
                s.append(self.pick(COMBINING))
        return "".join(s)

    def zero_width(self):
        w = self.pick(ENGLISH_WORDS)
        k = self.r.randint(0, len(w))
        return w[:k] + self.pick(ZERO_WIDTH) + w[k:]

    def symbols(self):
        return "".join(self.pick(SYMBOLS + PUNCT) + self.pick(["", "", " "]) for _ in range(self.r.randint(1, 10)))

    def random_chars(self):
        return "".join(self.pick(RANDOM_POOL) for _ in range(self.r.randint(1, 40)))

    def special(self):
        return self.pick(SPECIAL_TEXT)

    def long_word(self):
        n = self.r.randint(10_000, 20_000)
        kind = self.kind_counter % 8  # every kind once per 8 long words
        self.kind_counter += 1
        if kind == 0:
            return "a" * n  # worst case for BPE: many identical pairs
        if kind == 1:
            return "".join(self.pick(LATIN_BASE) for _ in range(n))
        if kind == 2:
            return "".join(self.pick(CYRILLIC) for _ in range(n))
        if kind == 3:
            return "".join(chr(self.r.randint(0x4E00, 0x9FFF)) for _ in range(n))
        if kind == 4:
            return "1234567890" * (n // 10)
        if kind == 5:
            return "!" * (n // 2) + "-=" * (n // 2)
        if kind == 6:
            return " " * n + self.pick(["x", "", "\n", "\u00a0"])
        return "ab" * (n // 2) + "\U0001F600" * 50

    SEGMENTS = [("english", 30), ("latin", 6), ("cyrillic", 5), ("greek", 4), ("arabic", 5), ("hebrew", 3),
                ("devanagari", 4), ("thai", 3), ("cjk", 6), ("hangul", 3), ("emoji", 5), ("numbers", 5),
                ("whitespace", 12), ("url", 4), ("combining", 3), ("zero_width", 3), ("symbols", 3),
                ("random_chars", 3), ("special", 2)]

    def text(self):
        r = self.r
        x = r.random()
        if x < 0.02:
            return ""
        if x < 0.03:
            return self.whitespace()  # only whitespace
        if x < 0.04:
            return self.pick(["a", " ", "'s", "\u00a0", "<|endoftext|>", "\U0001F600", "\u0301", "\n", "1"])
        names = [n for n, _ in self.SEGMENTS]
        weights = [w for _, w in self.SEGMENTS]
        parts = []
        for _ in range(r.choice([1, 2, 3, 5, 8, 12, 20, 40])):
            name = r.choices(names, weights)[0]
            parts.append(getattr(self, name)())
            parts.append(r.choices([" ", "\n", "\n\n", "", "\t", "\u00a0", "  ", "\r\n"], [40, 15, 8, 10, 2, 2, 3, 2])[0])
        if r.random() < 0.85:
            while parts and parts[-1] in (" ", "\n", "\n\n", "\t", "\u00a0", "  ", "\r\n"):
                parts.pop()  # OSCAR texts are rstripped; keep trailing whitespace in some
        if r.random() < 0.05:
            parts.insert(0, self.whitespace())
        return "".join(parts)

    def meta(self):
        r = self.r
        x = r.random()
        if x < 0.3:
            return None
        if x < 0.5:
            return {"lang": self.pick(["en", "fr", "zh", "ar", "hi"]), "score": round(r.random(), 4), "ok": r.random() < 0.5,
                    "tags": [self.pick(ENGLISH_WORDS) for _ in range(r.randint(0, 3))], "null": None}
        if x < 0.7:
            return {"url": self.url(), "nested": {"a": [1, 2.5e-3, -7, {"b": "text\"quoted\" \\ back/slash"}]},
                    "text": "not the text field"}
        if x < 0.85:
            return [self.random_chars(), r.randint(-2 ** 62, 2 ** 62), 1e300, True, False, None, "\u2028\u2029"]
        return self.pick(ENGLISH_WORDS) + " \U0001F600"


# A dense alphabet of the characters where pre-tokenizers differ most: short strings over it (after the prose-like
# documents) put apostrophes, spaces of every kind, digits, marks and letters next to each other in all orders.
DENSE_ALPHABET = (list("aZsStTrRevVmlLdD'' 09.-!") + [" ", " ", " ", "\t", "\n", "\r", "\r\n", "\u00a0", "\u2003",
                  "\u3000", "\u0085", "\u2028", "\x0b", "\x1c", "\u200b", "\u0301", "\u0903", "\u20dd", "\u2019",
                  "\u0660", "\u0967", "\u00b2", "\u2160", "\u4e00", "\u3007", "\u00e9", "\u0436", "\u05d0", "\u0e01",
                  "\uac00", "\U0001F600", "\U0001F3FD", "\u200d", "\ufe0f", "\U0001F1FA", "\u02b0", "\u01c5", "\u3002",
                  "\uff0c", "\u060c", "\u06d4", "\u0964", "\u2026", "(", ")", "|", ",", "?", "<", ">", "/", "_"])


def generate(seed=1234, target_bytes=4_000_000, long_words=8, dense=3000):
    """Records [{"id": int, "text": str, "meta": ...}] totalling about `target_bytes` of UTF-8 text, then `dense`
    short strings over DENSE_ALPHABET."""
    rng = random.Random(seed)
    g = _Gen(rng)
    records, total = [], 0
    long_at = set(rng.sample(range(40, 400), long_words))
    while total < target_bytes:
        i = len(records)
        if i in long_at:
            text = g.english()[:200] + " " + g.long_word() + rng.choice(["", " end.", "\n", "\U0001F600"])
        else:
            text = g.text()
        rec = {"id": i, "text": text}
        if rng.random() < 0.7:
            rec["meta"] = g.meta()
        records.append(rec)
        total += len(text.encode("utf-8"))
    for _ in range(dense):
        text = "".join(g.pick(DENSE_ALPHABET) for _ in range(rng.randint(1, 40)))
        records.append({"id": len(records), "text": text})
    return records


def dump_line(rec, style):
    """One JSON line in one of several styles (all decode to `rec` with json.loads)."""
    if style == 0:
        return json.dumps(rec, ensure_ascii=True)
    if style == 1:
        return json.dumps(rec, ensure_ascii=False)
    if style == 2:  # pandas DataFrame.to_json(orient="records", lines=True, force_ascii=False): ujson escapes '/'
        return json.dumps(rec, ensure_ascii=False, separators=(",", ":")).replace("/", "\\/")
    if style == 3:
        return json.dumps(rec, ensure_ascii=True, separators=(",", ":")).replace("/", "\\/")
    # style 4: text first, other keys after, spaces around separators
    d = {"text": rec["text"]}
    d.update((k, v) for k, v in rec.items() if k != "text")
    return json.dumps(d, ensure_ascii=False, separators=(" , ", " : "))


def write_jsonl(records, path, seed=1234):
    """Writes one line per record, the JSON style chosen per line (deterministic)."""
    rng = random.Random(seed ^ 0x5EED)
    with open(path, "w", encoding="utf-8", newline="") as f:
        for rec in records:
            line = dump_line(rec, rng.randrange(5))
            assert json.loads(line) == rec
            f.write(line + "\n")


def texts(records, key="text"):
    return [r[key] for r in records]


# ---------------------------------------------------------------------------------------------------------------
# Helpers shared by the tests

SKIP = 77  # ctest SKIP_RETURN_CODE
GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
GPT2_EOD = 50256


def skip(why):
    print(f"SKIP: {why}")
    sys.exit(SKIP)


def test_env(need_gpt2=True):
    """(mds-preprocess path, source dir, GPT-2 files dir); exits 77 when something needed is absent."""
    src = os.environ.get("MDS_SOURCE_DIR") or os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
    bin_dir = os.environ.get("MDS_BIN") or os.path.join(src, "build", "bin")
    exe = os.path.join(bin_dir, "mds-preprocess")
    if not os.path.exists(exe):
        raise SystemExit(f"FAIL: {exe} not found (set MDS_BIN to the directory of the built binaries)")
    gpt2 = os.path.normpath(os.path.join(src, "..", "shared", "data", "gpt2"))
    if need_gpt2 and not all(os.path.exists(os.path.join(gpt2, f)) for f in ("encoder.json", "vocab.bpe")):
        skip(f"GPT-2 files not found in {gpt2}")
    return exe, src, gpt2


def run(cmd, **kw):
    """Runs a command; on failure prints its output and raises."""
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)
    if p.returncode != 0:
        raise SystemExit(f"FAIL: {' '.join(map(str, cmd))} exited with {p.returncode}\n{p.stdout}\n{p.stderr}")
    return p


def mds_preprocess(exe, args):
    """Runs mds-preprocess --json ...; returns the parsed summary."""
    p = run([exe, "--json", "--progress", "off"] + [str(a) for a in args])
    return json.loads(p.stdout) if p.stdout.strip() else None


def gpt2_byte_decoder():
    """bytes_to_unicode() inverted: symbol -> byte (OpenAI encoder.py)."""
    bs = list(range(0x21, 0x7F)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


def tiktoken_gpt2(gpt2_dir):
    """tiktoken's gpt2 encoding built offline from encoder.json (mergeable_ranks = the byte strings of the tokens;
    their ids equal their ranks), no special tokens."""
    import tiktoken
    with open(os.path.join(gpt2_dir, "encoder.json"), encoding="utf-8") as f:
        encoder = json.load(f)
    dec = gpt2_byte_decoder()
    ranks = {bytes(dec[ch] for ch in tok): i for tok, i in encoder.items() if tok != "<|endoftext|>"}
    assert len(ranks) == 50256 and sorted(ranks.values()) == list(range(50256))
    return tiktoken.Encoding(name="gpt2-local", pat_str=GPT2_PATTERN, mergeable_ranks=ranks, special_tokens={})


DTYPES = {1: "u1", 2: "i1", 3: "<i2", 4: "<i4", 5: "<i8", 6: "<f8", 7: "<f8", 8: "<u2"}


def read_indexed(prefix):
    """Independent numpy reader of a Megatron mmap dataset (specs/data.md section 1): a dict with dtype code,
    sizes, pointers, doc_idx and the list of sequences (as Python lists)."""
    import numpy as np
    with open(prefix + ".idx", "rb") as f:
        idx = f.read()
    assert idx[:9] == b"MMIDIDX\x00\x00", f"{prefix}.idx: bad magic {idx[:9]!r}"
    version, code, n, d = struct.unpack_from("<QBQQ", idx, 9)
    assert version == 1, version
    assert len(idx) == 34 + 12 * n + 8 * d, (len(idx), n, d)
    sizes = np.frombuffer(idx, "<i4", n, 34)
    pointers = np.frombuffer(idx, "<i8", n, 34 + 4 * n)
    doc_idx = np.frombuffer(idx, "<i8", d, 34 + 12 * n)
    dt = np.dtype(DTYPES[code])
    data = np.fromfile(prefix + ".bin", dt)
    expect_ptr = np.concatenate([[0], np.cumsum(sizes.astype(np.int64))[:-1]]) * dt.itemsize if n else pointers
    assert (pointers == expect_ptr).all(), "pointers are not the byte offsets of the sequences"
    assert int(sizes.sum()) == data.size, (int(sizes.sum()), data.size)
    off = np.concatenate([[0], np.cumsum(sizes.astype(np.int64))])
    seqs = [data[off[i]:off[i + 1]].tolist() for i in range(n)]
    return {"code": code, "dtype": dt, "sizes": sizes, "pointers": pointers, "doc_idx": doc_idx, "seqs": seqs}


def describe_mismatch(doc_no, text, got, want, decode=None, label=("mds", "reference"), pieces=None):
    """A readable report of the first difference between two id lists."""
    k = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
    lines = [f"document {doc_no}: {len(text)} characters, {label[0]} {len(got)} ids, {label[1]} {len(want)} ids; "
             f"first difference at id #{k}",
             f"  {label[0]:>10}: ...{got[max(0, k - 5):k + 8]}",
             f"  {label[1]:>10}: ...{want[max(0, k - 5):k + 8]}"]
    if decode:
        try:
            before = decode(want[:k])
            lines.append(f"  text at the difference (char {len(before)}): {before[-30:]!r} | "
                         f"{text[len(before):len(before) + 40]!r}")
            lines.append(f"  {label[0]} tokens: {[decode([t]) for t in got[k:k + 6]]}")
            lines.append(f"  {label[1]} tokens: {[decode([t]) for t in want[k:k + 6]]}")
            if pieces:
                p = pieces(text[max(0, len(before) - 20):len(before) + 40])
                lines.append(f"  reference pre-tokenizer pieces around it: {p}")
        except Exception as e:  # noqa: BLE001 - diagnostics only
            lines.append(f"  (could not decode: {e})")
    lines.append(f"  text (first 300 chars): {text[:300]!r}")
    return "\n".join(lines)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--mb", type=float, default=4.0)
    a = ap.parse_args()
    recs = generate(a.seed, int(a.mb * 1e6))
    write_jsonl(recs, a.out, a.seed)
    print(f"{a.out}: {len(recs)} records, {sum(len(r['text'].encode()) for r in recs)} bytes of text "
          f"(Unicode {UNICODE_VERSION})")
