#!/usr/bin/env python3
"""scripts/doc_outputs.py compares what a page claims, not one CPU's digits.

1. Its comparison, line by line: another machine's rounding passes (a loss
   in its 8th digit, "0" against "9.54e-07" under a floor of 1e-05, a last
   printed digit); every kind of stale value fails (a count, a byte total, a
   CRC, a verdict, a difference above its floor, a loss outside its relative
   tolerance, a missing column).
2. End to end, on a copy of the pages: chapter 10's block as committed
   passes against a fresh run of ch10_mfu; the same block with a stale count,
   a stale FLOP figure, a ratio outside its tolerance or a missing line is
   named, page and line, with exit 1.

usage: test_doc_outputs.py REPO_ROOT BIN_DIR
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT, BIN = sys.argv[1], sys.argv[2]
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import doc_outputs  # noqa: E402

failures = []


def expect(cond, what):
    print(("ok    " if cond else "FAIL  ") + what)
    if not cond:
        failures.append(what)


# 1. The comparison (fp32 defaults: floor 1e-05, rtol 1e-06).
same = doc_outputs.same
agree = [
    ("   1    5.4715166    5.4715165   1.19e-07", "   1    5.4715166    5.4715165          0", "0 at the floor"),
    ("   sync TP          9.54e-07           6.28e-06", "   sync TP                 0            6.4e-06",
     "differences below the floor, other formats"),
    ("  2    8.1097064    8.1097069   5.88e-08", "  2    8.1097069    8.1097069   0.00e+00", "a loss's 8th digit"),
    ("step:  1  loss:  8.0901", "step:  1  loss:  8.0902", "a last printed digit (4 decimals)"),
    ("   total    2.675e+07", "   total    2.675e+07", "the same FLOP count"),
]
for old, new, what in agree:
    expect(same(old, new, []), f"passes: {what}: '{old.strip()}' / '{new.strip()}'")
stale = [
    ("   87 matmuls (titan::mm)", "   86 matmuls (titan::mm)", "a count"),
    ("all-gather (fp32)   1233600 B ( 9)", "all-gather (fp32)   1233664 B ( 9)", "a byte total"),
    ("rank-00000.safetensors  12316.4 KiB  CRC-32 3ab58548", "rank-00000.safetensors  12316.4 KiB  CRC-32 3ab58549",
     "a CRC"),
    ("   tolerance   5e-06   1e-05   -> match", "   tolerance   5e-06   1e-05   -> DIFFERS", "a verdict"),
    ("   2    5.3420768    5.3420771   3.58e-07", "   2    5.3420768    5.3420771   1.2e-03",
     "a difference above its floor (a lost averaging)"),
    ("   2    5.3420768    5.3420771", "   2    5.3420768    5.3430771", "a loss outside 1e-06 relative"),
    ("   total    2.675e+07", "   total    2.685e+07", "a FLOP count in e-notation"),
    ("  total   1803.0 KiB   2253.8 KiB", "  total   1803.0 KiB   2253.9 KiB", "a size with one decimal"),
    ("   1    5.4715166    5.4715165   1.19e-07", "   1    5.4715166    1.19e-07", "a missing column"),
    ("   output y          0.00606", "   output y          0.0061", "a bf16 difference under fp32's floor"),
]
for old, new, what in stale:
    expect(not same(old, new, []), f"fails: {what}: '{old.strip()}' / '{new.strip()}'")
expect(same("   output y          0.00606", "   output y          0.0061", [], floor=3e-2, rtol=1e-3),
       "passes under a bf16 block's floor 3e-02: 0.00606 / 0.0061")

# 2. End to end on a copy of the pages (the script finds them beside itself).
page_rel = doc_outputs.BLOCKS["ch10-results"]["page"]


def check(tmp):
    p = subprocess.run([sys.executable, os.path.join(tmp, "scripts", "doc_outputs.py"), "--check", BIN, "--only",
                        "^ch10-results$"], capture_output=True, text=True, timeout=600)
    return p.returncode, p.stdout + p.stderr


with tempfile.TemporaryDirectory(prefix="titan_doc_outputs_test_") as tmp:
    os.makedirs(os.path.join(tmp, "scripts"))
    shutil.copy(os.path.join(ROOT, "scripts", "doc_outputs.py"), os.path.join(tmp, "scripts"))
    shutil.copytree(os.path.join(ROOT, "docs"), os.path.join(tmp, "docs"))
    shutil.copy(os.path.join(ROOT, "README.md"), tmp)
    page = os.path.join(tmp, page_rel)
    original = open(page, encoding="utf-8").read()
    rc, out = check(tmp)
    expect(rc == 0, f"the committed page passes against a fresh ch10_mfu (exit {rc})")
    if rc != 0:
        print(out)
    plants = [
        (r"   87 matmuls", "   86 matmuls", "a stale count"),
        (r"(   6 · \(N − N_embedding\) +)2\.361e\+07", r"\g<1>2.371e+07", "a stale FLOP figure"),
        (r"= 1\.000000000 ×", "= 1.000010000 ×", "a ratio outside 1e-06 relative"),
        (r"\n   8 attention kernels[^\n]*", "", "a missing line"),
    ]
    for pattern, repl, what in plants:
        planted, n = re.subn(pattern, repl, original, count=1)
        assert n == 1, f"the page no longer has {pattern!r}"
        open(page, "w", encoding="utf-8").write(planted)
        rc, out = check(tmp)
        named = re.search(re.escape(page_rel) + r"(:\d+)?: block ch10-results", out) is not None
        expect(rc == 1 and named, f"{what} is named (exit {rc}): {out.strip().splitlines()[0] if out.strip() else ''}")
    open(page, "w", encoding="utf-8").write(original)

print(f"{len(failures)} failed" if failures else "every check passed")
sys.exit(1 if failures else 0)
