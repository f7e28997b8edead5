#!/usr/bin/env python3
"""Chapter pages' pasted program output, kept true by construction.

A page marks a pasted output block with a comment on the line before its
opening fence:

    <!-- output: ch08-files -->
    ```
    1. FSDP 4 trained 8 steps, ...
    ```

BLOCKS below says, per name, which program makes it (run from the build
folder's bin/), where its excerpt starts in the program's output, and which
of its lines are deterministic (losses, differences, bytes, checksums,
counts: compared) — the rest (timings, bubbles measured on a shared
machine) are machine-dependent and never compared.

    scripts/doc_outputs.py --check  BIN_DIR   # exit 1 naming each stale line
    scripts/doc_outputs.py --update BIN_DIR   # rewrite the blocks from fresh runs

Two kinds of deterministic value still depend on the machine's
floating-point path (its CPU, the BLAS kernels it picks): differences at the
rounding floor, written in e-notation (|dparam| 6.48e-06 on one machine,
7.92e-06 on another), are compared within a factor of 4 (a real bug, a
wrong eps or a missing reduction, moves them by orders of magnitude; an
exact 0 stays exact); values printed with 6 or more decimals (losses) may
differ by one unit in the last place (5.263335 on one machine, 5.263334 on
another: the fp32 rounding floor); checksums of trained weights (a block's
`mask`) are not compared at all.

--update rewrites a block's compared lines; a block marked `whole` is
replaced whole (its timings too) by the same number of lines of output.
Each program runs with a temp folder of its own; its paths print as
/tmp/... whatever that folder is.
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The schedules' equivalence rows of chapter 05 (losses and differences).
CH05_ROWS = r"^(1\. equivalence|   schedule +last loss|   reference|   (naive|GPipe|1F1B|Interleaved1F1B|" \
            r"InterleavedZeroBubble|ZBVZeroBubble) +\d\.\d{8}|   tolerance|OK: every schedule)"

BLOCKS = {
    "ch02-results": dict(page="docs/chapters/02-fsdp2.md", cmd=["ch02_fsdp2", "--nproc", "4"], start="FSDP2 on 4 ranks",
                         compare=r"^(FSDP2 on|step  loss|\d +\d\.\d{6} |tolerance|reference \(|fsdp rank|"
                                 r"peak gathered|communication per rank|all-gather|reduce-scatter)"),
    "ch05-results": dict(page="docs/chapters/05-pipeline-parallel.md",
                         cmd=["ch05_pipeline_parallel", "--nproc", "4"],
                         start="1. equivalence", compare=CH05_ROWS),
    "ch10-results": dict(page="docs/chapters/10-mfu.md", cmd=["ch10_mfu"], start="1. the formula",
                         compare=r"^(?!3\. MFU|   The recorded step|   reports MFU)."),
    "ch08-files": dict(page="docs/chapters/08-distributed-checkpoint.md",
                       cmd=["ch08_distributed_checkpoint", "--nproc", "4"],
                       start="1. FSDP 4 trained", compare=r"^1\. FSDP|CRC-32 [0-9a-f]{8}$",
                       mask=[r"CRC-32 [0-9a-f]{8}"]),
    "ch08-layouts": dict(page="docs/chapters/08-distributed-checkpoint.md",
                         cmd=["ch08_distributed_checkpoint", "--nproc", "4"],
                         start="2. the FSDP 4 checkpoint", compare=r".", whole=True),
    "ch08-resume": dict(page="docs/chapters/08-distributed-checkpoint.md",
                        cmd=["ch08_distributed_checkpoint", "--nproc", "4"],
                        start="3. resumed", compare=r".", whole=True),
    "ch08-crash": dict(page="docs/chapters/08-distributed-checkpoint.md",
                       cmd=["ch08_distributed_checkpoint", "--nproc", "4"],
                       start="5. crash safety", compare=r".", whole=True),
}

MARK = re.compile(r"^<!-- output: ([a-z0-9-]+) -->$")
SCI = re.compile(r"^[-+]?\d+(\.\d+)?e[-+]\d+$")
DEC = re.compile(r"^[-+]?\d+\.(\d{6,})$")


def same(old, new, masks):
    """Whether a page's line still says what the program's says (see the top)."""
    for m in masks:
        old, new = re.sub(m, "<machine>", old), re.sub(m, "<machine>", new)
    a, b = old.split(), new.split()
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if x == y:
            continue
        if SCI.match(x) and SCI.match(y):
            fx, fy = float(x), float(y)
            if fx > 0 and fy > 0 and max(fx, fy) / min(fx, fy) <= 4:
                continue
        dx, dy = DEC.match(x), DEC.match(y)
        if dx and dy and len(dx.group(1)) == len(dy.group(1)):
            if abs(float(x) - float(y)) <= 1.5 * 10 ** -len(dx.group(1)):
                continue
        return False
    return True


def normalise(line):
    # The launcher's prefix, and the machine's temp folder.
    line = re.sub(r"^\[rank 0\] ?", "", line).rstrip()
    return re.sub(r"(?<![\w.])/\S*?/(titan_ch\d\d)", r"/tmp/\1", line)


def run(bin_dir, cmd, cache):
    key = tuple(cmd)
    if key not in cache:
        exe = os.path.join(bin_dir, cmd[0])
        # A temp folder of its own: the chapters' CTest runs may use theirs
        # (/tmp/titan_chNN_...) at the same time.
        with tempfile.TemporaryDirectory(prefix="titan_doc_outputs_") as tmp:
            p = subprocess.run([exe] + cmd[1:], capture_output=True, text=True, timeout=900,
                               env=dict(os.environ, TMPDIR=tmp))
        if p.returncode != 0:
            sys.exit(f"error: {' '.join(cmd)} exited {p.returncode}:\n{p.stdout[-2000:]}{p.stderr[-2000:]}")
        lines = [l for l in (p.stdout + p.stderr).split("\n") if not re.match(r"^\[rank [1-9]", l)]
        cache[key] = [normalise(l) for l in lines]
    return cache[key]


def excerpt(output, start, n, name):
    for i, line in enumerate(output):
        if line.startswith(start):
            return output[i:i + n]
    sys.exit(f"error: {name}: no line starting with '{start}' in the program's output")


def blocks_of(text):
    """(name, first line index, end index) of every marked block."""
    lines = text.split("\n")
    found = []
    for i, line in enumerate(lines):
        m = MARK.match(line)
        if not m:
            continue
        if i + 1 >= len(lines) or not lines[i + 1].startswith("```"):
            sys.exit(f"error: the mark '{line}' is not right before a ``` block")
        end = next(j for j in range(i + 2, len(lines)) if lines[j].startswith("```"))
        found.append((m.group(1), i + 2, end))
    return lines, found


def missing_figures():
    """Every image a page embeds (![..](path), relative to the page) exists:
    the figures are committed under docs/figures (scripts/figures.sh)."""
    problems = []
    pages = [os.path.join(ROOT, "README.md")]
    for d, _, files in os.walk(os.path.join(ROOT, "docs")):
        pages += [os.path.join(d, f) for f in files if f.endswith(".md")]
    for page in sorted(pages):
        for n, line in enumerate(open(page, encoding="utf-8"), 1):
            for target in re.findall(r"!\[[^\]]*\]\(([^)\s]+)\)", line):
                if "://" in target:
                    continue
                if not os.path.isfile(os.path.join(os.path.dirname(page), target)):
                    problems.append(f"{os.path.relpath(page, ROOT)}:{n}: the figure {target} does not exist "
                                    "(scripts/figures.sh makes them)")
    return problems


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--check", action="store_true")
    mode.add_argument("--update", action="store_true")
    ap.add_argument("bin_dir")
    args = ap.parse_args()

    cache, stale, seen = {}, [], set()
    pages = sorted({b["page"] for b in BLOCKS.values()})
    for page in pages:
        path = os.path.join(ROOT, page)
        lines, found = blocks_of(open(path, encoding="utf-8").read())
        for name, a, b in found:
            if name not in BLOCKS or BLOCKS[name]["page"] != page:
                sys.exit(f"error: {page}: unknown output block '{name}'")
            seen.add(name)
            spec = BLOCKS[name]
            want_re = re.compile(spec["compare"])
            fresh = excerpt(run(args.bin_dir, spec["cmd"], cache), spec["start"], b - a, name)
            page_cmp = [(k, l) for k, l in enumerate(lines[a:b]) if want_re.search(l)]
            fresh_cmp = [l for l in fresh if want_re.search(l)]
            if len(page_cmp) != len(fresh_cmp):
                stale.append(f"{page}: block {name}: {len(page_cmp)} compared lines on the page, "
                             f"{len(fresh_cmp)} in the program's output")
                continue
            for (k, old), new in zip(page_cmp, fresh_cmp):
                if not same(old, new, spec.get("mask", [])):
                    stale.append(f"{page}:{a + k + 1}: block {name}\n    page:    {old}\n    program: {new}")
                    if args.update and not spec.get("whole"):
                        lines[a + k] = new
            if args.update and spec.get("whole"):
                lines[a:b] = fresh
        if args.update:
            open(path, "w", encoding="utf-8").write("\n".join(lines))
    missing = sorted(set(BLOCKS) - seen)
    if missing:
        sys.exit(f"error: no mark for {', '.join(missing)} in the pages")
    stale += missing_figures()
    for s in stale:
        print(s)
    if args.check:
        if stale:
            print(f"{len(stale)} stale line(s): regenerate with scripts/doc_outputs.py --update BIN_DIR")
            return 1
        print(f"the pages' {len(BLOCKS)} output blocks match the programs' deterministic lines")
    return 0


if __name__ == "__main__":
    sys.exit(main())
