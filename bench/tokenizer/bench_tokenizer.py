#!/usr/bin/env python3
"""Tokens/s of titan's byte-level BPE against tiktoken and tokenizers.

One vocabulary, four encoders, the same text, side by side in one run:
  * titan, tiktoken form:       `titan tokenizer encode --file` on a rank file
  * titan, tokenizer.json form: the same on its tokenizer.json (converted with
                                transformers' TikTokenConverter, as Llama 3's)
  * tiktoken:                   Encoding(Llama 3 pattern).encode_ordinary
  * tokenizers:                 Tokenizer.from_file(tokenizer.json).encode
All encode the whole text as one string on one thread (RAYON_NUM_THREADS=1
for tokenizers; tiktoken's single-string encode is single-threaded), so the
numbers compare the algorithms, not the thread pools. The tokenizers package
is slow on one long string (it tracks offsets for every character), so it
also runs the way data loaders call it, encode_batch over the lines, still
on one thread; that row's token count is checked against tiktoken's
encode_ordinary of the same lines (not timed: a Python loop). The vocabulary is
titan's built-in one (trained on the fortunes corpus, 1792 ranks) unless
--ranks names another tiktoken file; the text is the fortunes corpus unless
--text names a file. Rounds alternate the encoders; the median pass of each
is reported, and every encoder must produce the same number of tokens.

Usage: bench/tokenizer/run.sh [--text FILE] [--ranks FILE] [--rounds 3]
"""

import argparse
import glob
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "reference"))
os.environ.setdefault("RAYON_NUM_THREADS", "1")

import tiktoken  # noqa: E402
from tiktoken.load import load_tiktoken_bpe  # noqa: E402
from tokenizers import Tokenizer  # noqa: E402

from tiktoken_reference import PAT, llama3_special_tokens  # noqa: E402


def fortunes_text(out):
    folder = os.environ.get("TITAN_FORTUNES_DIR", "/usr/share/games/fortunes")
    parts = []
    for path in sorted(glob.glob(os.path.join(folder, "*"))):
        if os.path.isfile(path) and not path.endswith(".dat") and not os.path.islink(path):
            with open(path, "rb") as f:
                parts.append(f.read())
    data = b"".join(parts).decode("utf-8", "replace")
    with open(out, "w", encoding="utf-8") as f:
        f.write(data)


def median_pass(fn, min_passes=3, min_seconds=0.5):
    times, begin, result = [], time.perf_counter(), None
    while len(times) < min_passes or time.perf_counter() - begin < min_seconds:
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), result


def titan_pass(titan, tokenizer, text_path):
    out = subprocess.run([titan, "tokenizer", "encode", "--tokenizer", tokenizer, "--file", text_path],
                         check=True, capture_output=True, text=True).stdout
    m = re.search(r"(\d+) tokens for (\d+) bytes .*median of \d+ passes ([0-9.]+) s", out)
    if not m:
        raise SystemExit("unexpected output from titan tokenizer encode:\n" + out)
    return float(m.group(3)), int(m.group(1))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--titan", default=os.path.join(ROOT, "build", "bin", "titan"))
    ap.add_argument("--text", help="text file (default: the fortunes corpus)")
    ap.add_argument("--ranks", help="tiktoken rank file (default: titan's built-in tokenizer, trained if needed)")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()

    work = tempfile.mkdtemp(prefix="titan-bench-tok-")
    text_path = args.text or os.path.join(work, "fortunes.txt")
    if not args.text:
        fortunes_text(text_path)
    ranks = args.ranks or os.path.join(work, "builtin.tiktoken")
    if not args.ranks:
        subprocess.run([args.titan, "tokenizer", "train", "--output", ranks], check=True, capture_output=True)
    from hf_tokenizer_reference import cmd_convert  # noqa: E402
    hf_dir = os.path.join(work, "hf")
    cmd_convert(ranks, hf_dir)

    with open(text_path, encoding="utf-8") as f:
        text = f.read()
    mergeable = load_tiktoken_bpe(ranks)
    specials = {t: len(mergeable) + i for i, t in enumerate(llama3_special_tokens())}
    enc = tiktoken.Encoding(name="bench", pat_str=PAT, mergeable_ranks=mergeable, special_tokens=specials)
    hf = Tokenizer.from_file(os.path.join(hf_dir, "tokenizer.json"))

    encoders = {
        "titan (tiktoken file)": lambda: titan_pass(args.titan, ranks, text_path),
        "titan (tokenizer.json)": lambda: titan_pass(args.titan, hf_dir, text_path),
        "tiktoken": lambda: median_pass(lambda: len(enc.encode_ordinary(text))),
        "tokenizers": lambda: median_pass(lambda: len(hf.encode(text, add_special_tokens=False).ids)),
    }
    lines = [line for line in text.split("\n") if line]
    by_line = {
        "tokenizers (lines)": lambda: median_pass(
            lambda: sum(len(e.ids) for e in hf.encode_batch(lines, add_special_tokens=False))),
    }
    lines_tokens = sum(len(enc.encode_ordinary(line)) for line in lines)
    times = {name: [] for name in list(encoders) + list(by_line)}
    counts, line_counts = {}, {}
    for _ in range(args.rounds):
        for group, found in ((encoders, counts), (by_line, line_counts)):
            for name, run in group.items():
                secs, n = run()
                times[name].append(secs)
                found[name] = n
    line_counts["tiktoken (lines)"] = lines_tokens
    for found in (counts, line_counts):
        if len(set(found.values())) != 1:
            raise SystemExit(f"encoders disagree on the token count: {found}")

    size = len(text.encode("utf-8"))
    n = next(iter(counts.values()))
    print(f"text: {size} bytes, {n} tokens ({size / n:.2f} bytes/token); vocabulary {len(mergeable)} ranks"
          f" + {len(specials)} specials; {args.rounds} rounds, median pass per encoder")
    med = {name: statistics.median(t) for name, t in times.items() if t}
    print(f"{'encoder':<24} {'seconds':>9} {'MB/s':>8} {'M tokens/s':>11}")
    for name, s in med.items():
        tokens = line_counts[name] if name in line_counts else n
        print(f"{name:<24} {s:9.4f} {size / s / 1e6:8.2f} {tokens / s / 1e6:11.3f}")
    for titan_name in ("titan (tiktoken file)", "titan (tokenizer.json)"):
        for ref in ("tiktoken", "tokenizers", "tokenizers (lines)"):
            print(f"ratio {titan_name} / {ref}: {med[ref] / med[titan_name]:.2f}x the speed")


if __name__ == "__main__":
    main()
