#!/usr/bin/env python3
"""Python references for titan.cpp's tokenizers (tests/data).

  sample-text OUT            writes the training text the tests use
  train TEXT NUM_RANKS OUT   trains a byte-level BPE rank file the naive way
                             (recount every pair after every merge), with
                             the tie rule titan's incremental trainer uses
  encode RANKS OUT           encodes a battery of strings with Python's
                             tiktoken (Llama 3 pattern and special tokens)
                             and writes the ids as JSON

Independent of the C++ code: the encoder is tiktoken itself, the trainer a
plain O(merges x corpus) loop written for readability.
"""
import base64
import collections
import json
import sys

import regex
import tiktoken
from tiktoken.load import load_tiktoken_bpe

# Llama 3's pre-tokenisation pattern, as in Meta's llama3 tokenizer.py.
PAT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
       r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def llama3_special_tokens(count=256):
    """Meta's Llama 3.1 tokenizer.py layout."""
    named = ["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>",
             "<|reserved_special_token_1|>", "<|finetune_right_pad_id|>", "<|step_id|>",
             "<|start_header_id|>", "<|end_header_id|>", "<|eom_id|>", "<|eot_id|>",
             "<|python_tag|>"]
    return named + [f"<|reserved_special_token_{2 + i}|>" for i in range(count - len(named))]


def sample_text():
    """A deterministic multilingual training text (no '%' lines, no final newline)."""
    english = (
        "The quick brown fox jumps over the lazy dog. It's a well-known pangram, and we'll "
        "use it here because it holds every letter. They're training a tokenizer; I've seen "
        "it done before. Don't worry: the merges you'd expect (th, he, in, er) come first.\n"
        "Numbers like 2024, 1234567 and 3.14159 split into groups of at most three digits.\n"
        "    def encode(self, text):\n        return [self.ranks[p] for p in pieces(text)]\n"
        "\tTabs\tand  double  spaces   and    runs     of      spaces.\n\n\n"
    )
    other = (
        "Le café est très bon à Paris, n'est-ce pas ? Ça dépend.\n"
        "Привет, мир! Москва — столица России.\n"
        "東京は日本の首都です。北京是中国的首都。\n"
        "Ελληνικά και עברית και العربية.\n"
        "Emoji: 😀 🎉 👍 and more 😀😀.\n"
    )
    parts = []
    for i in range(40):
        parts.append(english)
        parts.append(other if i % 2 == 0 else other.upper())
        parts.append(f"Line {i}: value={i * 37 % 1000} total={i * 12345} ratio={i / 7:.4f}\n")
        parts.append(" " * (i % 9) + "indented text\n")
    return "".join(parts).rstrip("\n")


def battery():
    """Strings the C++ encoder must encode exactly as tiktoken does."""
    s = [
        "", "Hello, world!", "hello world", " leading space", "trailing space ", "trailing spaces   ",
        "  two leading", "tabs\tand\t\ttabs", "new\nline", "crlf\r\nline", "\n\n\nnewlines", "a\n \n b",
        "   \n   ", "x  \t \n\t y", "\t", " ", "\r", "\u00a0nbsp\u00a0 x", "\u3000ideographic\u3000space",
        "1234567", "12 345 6789", "3.14159", "x1y22z333w4444", "٣٤٥٦ arabic-indic digits", "x²³ superscripts",
        "Ⅻ roman numeral", "½ fraction",
        "I'll we've they're she's it'S YOU'LL He'D I'm can't", "'s 'S 't 're 'RE 'rE 've 'm 'll 'LL 'd",
        "'sound 'tree 'x '", "ſ test 'ſ 'ſun", "don’t (curly apostrophe)", "''ll", "'\n'", "x'", "'1",
        "!!!???...", "a...b", "(parenthesis) [brackets] {braces}", "#$%&*+-/<=>@^_`|~", "-- dash --",
        "x=1;y=2;", "end.\n\n", "foo!\r\n\r\nbar", " !\n", "a ,b", ".\n\n\n x",
        "café naïve résumé", "Ünïcödé façade", "東京は日本の首都です。", "中文字符测试", "한국어 텍스트",
        "Привет, мир! Как дела?", "Ελληνικά γράμματα", "עברית", "مرحبا بالعالم", "हिन्दी पाठ",
        "emoji 😀🎉👍🏽 family 👨‍👩‍👧‍👦", "🇫🇷 flag", "combining e\u0301 and a\u0308", "math ∑∫√∞ ≠ ≤",
        "zero\u200bwidth", "\u0085nel", "line\u2028sep", "back\bspace o\bverstrike _\bu_\bn",
        "\x00nul\x01", "\x1c\x1d\x1e\x1f info separators", "\x0b\x0c vertical tab form feed",
        "<|begin_of_text|>Hello<|end_of_text|>", "<|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>",
        "<|reserved_special_token_5|>", "text <|eot_id|> text", "<|not_special|>", "<|begin_of_text",
        "<|eot_id|><|eot_id|>", " <|python_tag|>x",
        " " * 200 + "x", " " * 65, "a" * 300, "!" * 150, "\n" * 100, "word " * 50, "x" + "\t" * 70 + "\n" + " " * 70,
        "1" * 100, "ab" * 80, "😀" * 40, "The quick brown fox " * 8,
    ]
    s += sample_text().split("\n")[:20]
    s.append(sample_text()[:3000])
    return s


def cmd_sample_text(out):
    with open(out, "w", encoding="utf-8", newline="") as f:
        f.write(sample_text())


def train(text, num_ranks):
    vocab = [bytes([b]) for b in range(256)]
    index = {t: i for i, t in enumerate(vocab)}
    pieces = collections.Counter(p.encode("utf-8") for p in regex.findall(PAT, text))
    words = [(list(p), n) for p, n in sorted(pieces.items()) if len(p) >= 2]
    while len(vocab) < num_ranks:
        stats = collections.Counter()
        for w, n in words:
            for pair in zip(w, w[1:]):
                stats[pair] += n
        if not stats:
            break
        (a, b), _ = min(stats.items(), key=lambda kv: (-kv[1], kv[0]))
        merged = vocab[a] + vocab[b]
        if merged in index:
            z = index[merged]
        else:
            z = len(vocab)
            vocab.append(merged)
            index[merged] = z
        new_words = []
        for w, n in words:
            out, i = [], 0
            while i < len(w):
                if i + 1 < len(w) and w[i] == a and w[i + 1] == b:
                    out.append(z)
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            new_words.append((out, n))
        words = new_words
    return vocab


def cmd_train(text_path, num_ranks, out):
    with open(text_path, encoding="utf-8", newline="") as f:
        text = f.read()
    vocab = train(text, int(num_ranks))
    with open(out, "w") as f:
        for r, t in enumerate(vocab):
            f.write(f"{base64.b64encode(t).decode()} {r}\n")


def cmd_encode(ranks_path, out):
    ranks = load_tiktoken_bpe(ranks_path)
    n = len(ranks)
    specials = {t: n + i for i, t in enumerate(llama3_special_tokens())}
    enc = tiktoken.Encoding(name="titan-test", pat_str=PAT, mergeable_ranks=ranks, special_tokens=specials)
    cases = []
    for text in battery():
        ordinary = enc.encode(text, disallowed_special=())
        special = enc.encode(text, allowed_special="all")
        assert enc.decode_bytes(ordinary) == text.encode("utf-8")
        cases.append({"text": text, "ordinary": ordinary, "special": special})
    with open(out, "w") as f:
        json.dump({"num_base": n, "vocab_size": enc.n_vocab, "specials": specials, "cases": cases,
                   "pattern": PAT, "tiktoken": tiktoken.__version__}, f)


if __name__ == "__main__":
    cmd, *args = sys.argv[1:]
    {"sample-text": cmd_sample_text, "train": cmd_train, "encode": cmd_encode}[cmd](*args)
