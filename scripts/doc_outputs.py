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

What a compared line claims is compared, not its last digits: the same
program on another CPU (Intel or AMD, AVX-512 or AVX2, MKL's or oneDNN's
GEMM) rounds differently. Word by word, outside the masks:
  - words, integers (counts, bytes, steps), hex (CRCs) and shapes: exactly;
  - a number with a decimal point or an exponent (a loss, a difference, a
    ratio) agrees when it is the same number, when both are at most the
    block's `floor` in magnitude (a difference column at the rounding floor
    claims only that it is below the bound the program states: "0" and
    "9.54e-07" say the same under a bound of 1e-05), when the two differ by
    at most `rtol` relative (a loss agrees to the tolerance its chapter
    states, not to its 8th digit), or, printed with 4 or more decimals, by
    one and a half units in the last place.
Each block declares its `floor` and `rtol` once, in BLOCKS (defaults
FP32_FLOOR and FP32_RTOL: fp32 programs), from the bounds its program
prints and the spread measured across kernel paths (the comment at
FP32_FLOOR). A stale page still fails: a changed count, byte total or CRC,
a missing line, a difference above its floor (a wrong eps, a lost
averaging: 1e-3 and more), a loss outside its tolerance.

--update rewrites a block's compared lines; a block marked `whole` is
replaced whole (its timings too) by the same number of lines of output.
Each program runs with a temp folder of its own (its TMPDIR, and its working
directory unless `in_root`: run from the repository root, for arguments
that name files there); its paths print as /tmp/... whatever that folder is.

A block may leave parts of the output out: a line `...` on the page cuts it
into pieces, and `start` is then a list, one first line per piece, each
searched for after the piece before it. `prompt` says the block's first line
is the command as typed, `$ build/bin/NAME ARGS` (compared like the rest);
`status` is the exit status the command must end with (a refusal: 1).
A `prompt` block shows what its command prints to the end: a line the
program prints after the block's last is stale too (`to_end`, True by
default for `prompt` blocks; set it for others that end where the output
does). `--only REGEX` checks or updates the blocks whose names match.
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The claims of an fp32 block (see the top): differences at or below
# FP32_FLOOR are all "below the bound" (the programs' fp32 bounds: weights
# |d| <= 1e-05 + 1e-05|ref|, at most 2e-05 for weights below 1; FSDP's
# 2e-05), and values agree to FP32_RTOL relative. Measured with --spread
# against the pages (written on a 2-core AMD EPYC: AVX-512, oneDNN's GEMM),
# under ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2
# MKL_ENABLE_INSTRUCTIONS=AVX2 (MKL's GEMM, AVX2 ATen and titan kernels)
# and under ATEN_CPU_CAPABILITY=default (portable ATen and titan kernels):
# fp32 differences reached 1.28e-05 (ch04-sp2's weights, 9.06e-06 on the
# page), values moved by at most 1.9e-07 relative; bf16 differences reached
# 2.69e-03 (ch03/ch04 under their floors 3e-02 and 5e-03; ch01-bf16 1.95e-03
# under 3e-03), values 3.0e-05 relative; chapter 12's weights 7.46e-05
# under 1e-04.
FP32_FLOOR = 2e-5
FP32_RTOL = 1e-6
# bf16 blocks: their differences are bounded at 3e-3 to 5e-3 absolute on
# weights (the programs' tolerance lines), their losses at 1e-2 relative.
BF16_FLOOR = 5e-3
BF16_RTOL = 1e-3

# The schedules' equivalence rows of chapter 05 (losses and differences).
CH05_ROWS = r"^(1\. equivalence|   schedule +last loss|   reference|   (naive|GPipe|1F1B|Interleaved1F1B|" \
            r"InterleavedZeroBubble|ZBVZeroBubble) +\d\.\d{8}|   tolerance|OK: every schedule)"

# Chapter 01's step tables end in wall-clock columns (ref ms, ddp ms; comm ms);
# the overlap timeline is wall-clock throughout.
CH01_COMPARE = r"^(?!overlap in step|  all-reduce |\d+ of \d+ bucket all-reduces)."
CH01_MS = r"( +\d+\.\d\d)+$"
# Chapter 11's section 2 (ms before the four byte counts) and 3 (the two ms
# columns, and their imbalances), section 4's imbalance of the measured times.
CH11_MASK = [r"\d+\.\d(?=( +\d+){4}$)", r"( +\d+\.\d)+$", r"\d+\.\d\d +\d+\.\d\d(?= +\(max / mean)",
             r"\d+\.\d\d(?= +\d+\.\d%$)"]
# Which weight differs most at the rounding floor depends on the kernels
# (chapter 12's "max |dweight| ... (NAME)"): masked, its value compared.
CH12_WORST_WEIGHT = r"(?<=\()[\w.]+\.weight(?=\)$)"
ESTIMATE_405B = ["titan", "estimate", "--model.flavor", "405B"]

BLOCKS = {
    "ch02-results": dict(floor=2e-5, page="docs/chapters/02-fsdp2.md", cmd=["ch02_fsdp2", "--nproc", "4"], start="FSDP2 on 4 ranks",
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
    "ch08-hf": dict(page="docs/chapters/08-distributed-checkpoint.md",
                    cmd=["ch08_distributed_checkpoint", "--nproc", "4"],
                    start="6. the model as a Hugging Face folder", compare=r".", whole=True),
    "ch01-fp32": dict(page="docs/chapters/01-data-parallel.md", cmd=["ch01_data_parallel", "--nproc", "4"],
                      start="Chapter 01: data parallelism", compare=CH01_COMPARE, mask=[CH01_MS]),
    "ch01-bf16": dict(floor=3e-3, rtol=BF16_RTOL, page="docs/chapters/01-data-parallel.md",
                      cmd=["ch01_data_parallel", "--nproc", "2", "--dtype", "bf16", "--grad-accum", "2", "--steps", "3"],
                      start=["step     loss ref", "communication per step"], compare=CH01_COMPARE, mask=[CH01_MS]),
    "ch03-tp4": dict(page="docs/chapters/03-tensor-parallel.md", cmd=["ch03_tensor_parallel", "--nproc", "4"],
                     start="Chapter 03: tensor parallelism", compare=r"."),
    "ch03-tp2": dict(page="docs/chapters/03-tensor-parallel.md", cmd=["ch03_tensor_parallel", "--nproc", "2"],
                     start=["2. FFN pair", "   step     loss ref"], compare=r"."),
    "ch03-tp2-bf16": dict(floor=3e-2, rtol=BF16_RTOL, page="docs/chapters/03-tensor-parallel.md",
                          cmd=["ch03_tensor_parallel", "--nproc", "2", "--dtype", "bf16", "--steps", "3"],
                          start=["   vs the unsharded pair", "   step     loss ref", "OK: tensor parallelism"],
                          compare=r"."),
    "ch04-sp4": dict(page="docs/chapters/04-sequence-parallel.md", cmd=["ch04_sequence_parallel", "--nproc", "4"],
                     start="Chapter 04: sequence parallelism", compare=r"."),
    "ch04-sp2": dict(page="docs/chapters/04-sequence-parallel.md", cmd=["ch04_sequence_parallel", "--nproc", "2"],
                     start="1. equivalence", compare=r"."),
    "ch04-sp4-seq64": dict(page="docs/chapters/04-sequence-parallel.md",
                           cmd=["ch04_sequence_parallel", "--nproc", "4", "--seq-len", "64"],
                           start="3. activation memory", compare=r"."),
    "ch04-sp2-bf16": dict(floor=BF16_FLOOR, rtol=BF16_RTOL, page="docs/chapters/04-sequence-parallel.md",
                          cmd=["ch04_sequence_parallel", "--nproc", "2", "--dtype", "bf16"],
                          start=["1. equivalence", "3. activation memory"], compare=r"."),
    # The flash kernel's memory counts the tile scratch of the threads that
    # picked up work, which varies from run to run below ~4096 tokens: masked,
    # with the times. The sweep to 32768 needs ~10 GiB (math attention's S and P).
    "ch06-ladder": dict(floor=2e-6, page="docs/chapters/06-flash-attention.md",
                        cmd=["ch06_flash_attention", "--max-seq", "32768"], start="0. the ladder", compare=r".",
                        mask=[r"(?<=flash kernel) +\d+\.\d{3} MiB", r" +\d+\.\d$"]),
    "ch06-memory": dict(page="docs/chapters/06-flash-attention.md",
                        cmd=["ch06_flash_attention", "--max-seq", "32768"], start="       seq S = seq", compare=r".",
                        mask=[r" +\d+\.\d{3} MiB", r"( +\d+\.\d)+$", r"flash x\d+\.\d"]),
    "ch06-equality": dict(floor=2e-6, page="docs/chapters/06-flash-attention.md",
                          cmd=["ch06_flash_attention", "--max-seq", "32768"], start="2. flash vs math", compare=r"."),
    "ch06-speed": dict(page="docs/chapters/06-flash-attention.md",
                       cmd=["ch06_flash_attention", "--max-seq", "32768"], start="3. forward + backward",
                       compare=r"^3\. forward|bench/attention runs", whole=True),
    "ch07-results": dict(floor=1e-5, page="docs/chapters/07-async-tensor-parallel.md",
                         cmd=["ch07_async_tensor_parallel", "--nproc", "4"], start="1. Both equal",
                         compare=r"^(1\. Both|   run  |   (sync|async) TP +(0|\d\.\d+e-\d+) |   tolerance|2\. Time)"),
    # Section 2's ranges are ordered by their times; the phase peaks and
    # `other` of section 3 move with when the communication buffers are freed.
    "ch09-profile": dict(page="docs/chapters/09-profiling.md", cmd=["ch09_profiling", "--nproc", "2"],
                         start="1. trained 4 steps", compare=r"^(?!   (titan|fsdp|c10d|aten)::).",
                         mask=[r"tb/\d{8}-\d{4}", r"took \d+\.\d+ ms", r"( +\d+\.\d\d){2}$"]),
    "ch11-documents": dict(floor=5e-5, page="docs/chapters/11-context-parallel.md", cmd=["ch11_context_parallel", "--nproc", "4"],
                           start="4. Per-rank attention work under block-causal", compare=r".", mask=CH11_MASK),
    "ch11-results": dict(floor=5e-5, page="docs/chapters/11-context-parallel.md", cmd=["ch11_context_parallel", "--nproc", "4"],
                         start=["1. The sequence cut", "5. Llama"], compare=r".", mask=CH11_MASK),
    "ch11-seq-len": dict(page="docs/chapters/11-context-parallel.md",
                         cmd=["titan", "train", "--nproc", "4", "--parallelism.context_parallel_degree", "2",
                              "--parallelism.context_parallel_rotate_method", "alltoall",
                              "--parallelism.context_parallel_load_balancer", "headtail", "--training.seq_len", "18"],
                         in_root=True, status=1, start="error: [training] seq_len", compare=r"."),
    "ch12-layout": dict(floor=1e-4, mask=[CH12_WORST_WEIGHT], page="docs/chapters/12-capstone.md", cmd=["ch12_capstone", "--nproc", "8"],
                        start="Chapter 12: PP 2 x FSDP 2 x TP 2", compare=r"."),
    "ch12-4d": dict(floor=1e-4, mask=[CH12_WORST_WEIGHT], page="docs/chapters/12-capstone.md", cmd=["ch12_capstone", "--nproc", "16", "--cp", "2"],
                    start=["Chapter 12: PP 2 x FSDP 2 x CP 2", "2e. FSDP 4"], compare=r"."),
    "ch12-at-scale": dict(page="docs/chapters/12-capstone.md", cmd=["ch12_capstone", "--nproc", "8"],
                          start="4. At scale.", compare=r"."),
    "ch12-estimate-2048": dict(page="docs/chapters/12-capstone.md", in_root=True, prompt=True, start="model ",
                               cmd=["titan", "estimate", "--job.config_file", "train_configs/llama3_405b_large.toml",
                                    "--model.flavor", "405B", "--nproc", "2048"], compare=r"."),
    "ch12-predict-405b": dict(page="docs/chapters/12-capstone.md", prompt=True, start=["titan predict:", "predicted: "],
                              compare=r".", in_root=True,
                              cmd=["titan", "predict", "--job.config_file", "train_configs/llama3_405b.toml", "--nproc",
                                   "512", "--cluster.preset", "h100_sxm"]),
    "predict-70b-256": dict(page="docs/predict.md", prompt=True, start="titan predict:", compare=r".", in_root=True,
                            cmd=["titan", "predict", "--job.config_file", "train_configs/llama3_70b.toml", "--nproc",
                                 "256", "--cluster.preset", "h100_sxm"]),
    "estimate-405b-64": dict(page="docs/estimate.md", prompt=True, start=["model ", "Total estimated"], compare=r".",
                             cmd=["titan", "estimate", "--job.config_file", "train_configs/llama3_405b.toml",
                                  "--nproc", "64"], in_root=True),
    "ch12-estimate-64": dict(page="docs/chapters/12-capstone.md", prompt=True, start="model ", compare=r".",
                             cmd=ESTIMATE_405B + ["--nproc", "64", "--training.data_parallel_shard_degree", "2",
                                                  "--training.tensor_parallel_degree", "8",
                                                  "--experimental.pipeline_parallel_degree", "4"]),
    "ch12-estimate-128": dict(page="docs/chapters/12-capstone.md", prompt=True, start="error: ", status=1,
                              compare=r".",
                              cmd=ESTIMATE_405B + ["--nproc", "128", "--training.data_parallel_shard_degree", "2",
                                                   "--training.tensor_parallel_degree", "8",
                                                   "--experimental.pipeline_parallel_degree", "4"]),
    "ch12-estimate-128-ac": dict(page="docs/chapters/12-capstone.md", prompt=True, start="model ", compare=r".",
                                 cmd=ESTIMATE_405B + ["--nproc", "128", "--training.data_parallel_shard_degree", "2",
                                                      "--training.tensor_parallel_degree", "8",
                                                      "--experimental.pipeline_parallel_degree", "8",
                                                      "--activation_checkpoint.mode", "full"]),
    "ch12-estimate-128-cp": dict(page="docs/chapters/12-capstone.md", prompt=True, start="model ", compare=r".",
                                 cmd=ESTIMATE_405B + ["--nproc", "128", "--training.data_parallel_shard_degree", "2",
                                                      "--training.context_parallel_degree", "2",
                                                      "--training.tensor_parallel_degree", "8",
                                                      "--experimental.pipeline_parallel_degree", "4"]),
    # Which weight is the worst at the rounding floor depends on the kernels:
    # its name is masked where the step is "ok" (a DIFFERS line keeps it).
    "ch12-verify-405b": dict(floor=2.5e-4, mask=[r"\S+\.weight(?= +ok$)"], page="docs/chapters/12-capstone.md", in_root=True, prompt=True,
                             start=["titan verify:", "verdict:"], compare=r".",
                             cmd=["titan", "verify", "--nproc", "8", "--job.config_file", "train_configs/llama3_405b.toml",
                                  "--training.tensor_parallel_degree", "2", "--experimental.pipeline_parallel_degree", "2",
                                  "--training.seq_len", "64", "--float8.enable_float8_linear", "false",
                                  "--checkpoint.async_mode", "async", "--validation.enable", "--validation.dataset",
                                  "builtin", "--validation.seq_len", "64", "--validation.local_batch_size", "2",
                                  "--validation.freq", "2", "--validation.steps", "2", "--steps", "4",
                                  "--resume-at", "2"]),
    "ch12-estimate-128-cp-rs": dict(page="docs/chapters/12-capstone.md", prompt=True, start="model ", compare=r".",
                                    cmd=ESTIMATE_405B + ["--nproc", "128", "--training.data_parallel_shard_degree", "2",
                                                         "--training.context_parallel_degree", "2",
                                                         "--training.tensor_parallel_degree", "8",
                                                         "--experimental.pipeline_parallel_degree", "4",
                                                         "--training.fsdp_reduce_scatter_per_microbatch", "true",
                                                         "--training.fsdp_reshard_after_forward", "always"]),
}

MARK = re.compile(r"^<!-- output: ([a-z0-9-]+) -->$")
# A numeric word, with what stands around it kept apart ("(1.2e-05)", "6.1%,").
NUMBER = re.compile(r"^([^\d+\-.]*?)([-+]?(?:\d+\.?\d*|\.\d+)(?:e[-+]?\d+)?)([^\d]*)$")


def same(old, new, masks, exact=False, floor=None, rtol=None):
    """Whether a page's line still says what the program's says (see the top).
    `exact`: word for word outside the masks (no tolerance at all)."""
    floor = FP32_FLOOR if floor is None else floor
    rtol = FP32_RTOL if rtol is None else rtol
    for m in masks:
        old, new = re.sub(m, "<machine>", old), re.sub(m, "<machine>", new)
    a, b = old.split(), new.split()
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if x == y:
            continue
        if exact:
            return False
        mx, my = NUMBER.match(x), NUMBER.match(y)
        if not (mx and my) or mx.group(1) != my.group(1) or mx.group(3) != my.group(3):
            return False
        sx, sy = mx.group(2), my.group(2)
        if not any(c in sx + sy for c in ".e"):
            return False  # integers (counts, bytes, steps) are exact
        fx, fy = float(sx), float(sy)
        if fx == fy or max(abs(fx), abs(fy)) <= floor:
            continue
        if abs(fx - fy) <= rtol * max(abs(fx), abs(fy)):
            continue
        dx, dy = re.search(r"\.(\d+)$", sx), re.search(r"\.(\d+)$", sy)
        if dx and dy and len(dx.group(1)) == len(dy.group(1)) >= 4:
            if abs(fx - fy) <= 1.5 * 10 ** -len(dx.group(1)):
                continue
        return False
    return True


def measure_spread(name, old, new, spec, spread):
    """--spread: the largest relative move of a number above the block's
    floor, and the largest number at or below it, page against program."""
    floor = spec.get("floor", FP32_FLOOR)
    for m in spec.get("mask", []):
        old, new = re.sub(m, "<machine>", old), re.sub(m, "<machine>", new)
    rel, low = spread.get(name, (0.0, 0.0))
    for x, y in zip(old.split(), new.split()):
        mx, my = NUMBER.match(x), NUMBER.match(y)
        if not (mx and my) or not any(c in mx.group(2) + my.group(2) for c in ".e"):
            continue
        fx, fy = float(mx.group(2)), float(my.group(2))
        if fx == fy:
            continue
        if max(abs(fx), abs(fy)) <= floor:
            low = max(low, abs(fx), abs(fy))
        else:
            rel = max(rel, abs(fx - fy) / max(abs(fx), abs(fy)))
    spread[name] = (rel, low)


def normalise(line):
    # The launcher's prefix, and the machine's temp folder.
    line = re.sub(r"^\[rank 0\] ?", "", line).rstrip()
    return re.sub(r"(?<![\w.])/\S*?/(titan_ch\d\d)", r"/tmp/\1", line)


def run(bin_dir, spec, cache):
    cmd = spec["cmd"]
    key = tuple(cmd)
    if key not in cache:
        exe = os.path.abspath(os.path.join(bin_dir, cmd[0]))
        # A temp folder of its own: the chapters' CTest runs may use theirs
        # (/tmp/titan_chNN_...) at the same time; what a program writes to its
        # working directory (ch07's SVG) lands there too.
        with tempfile.TemporaryDirectory(prefix="titan_doc_outputs_") as tmp:
            p = subprocess.run([exe] + cmd[1:], capture_output=True, text=True, timeout=900,
                               cwd=ROOT if spec.get("in_root") else tmp, env=dict(os.environ, TMPDIR=tmp))
        if p.returncode != spec.get("status", 0):
            sys.exit(f"error: {' '.join(cmd)} exited {p.returncode}:\n{p.stdout[-2000:]}{p.stderr[-2000:]}")
        lines = [l for l in (p.stdout + p.stderr).split("\n") if not re.match(r"^\[rank [1-9]", l)]
        cache[key] = [normalise(l) for l in lines]
    return cache[key]


def excerpt(output, spec, page, name):
    """The program's lines for a page block `page` (a list of lines): from
    each start on, as many lines as the block's piece has, pieces joined by
    `...` (see the top). Also returns the non-empty lines the program
    printed after the last piece's end."""
    starts = spec["start"] if isinstance(spec["start"], list) else [spec["start"]]
    pieces = [[]]
    for line in page:
        if line == "...":
            pieces.append([])
        else:
            pieces[-1].append(line)
    if len(pieces) != len(starts):
        sys.exit(f"error: {name}: {len(pieces)} piece(s) on the page (cut by '...'), {len(starts)} start(s)")
    fresh, at = [], 0
    if spec.get("prompt"):
        fresh.append("$ build/bin/" + " ".join(spec["cmd"]))
    for k, (piece, start) in enumerate(zip(pieces, starts)):
        n = len(piece) - (1 if k == 0 and spec.get("prompt") else 0)
        i = next((i for i in range(at, len(output)) if output[i].startswith(start)), None)
        if i is None:
            sys.exit(f"error: {name}: no line starting with '{start}' in the program's output")
        fresh += output[i:i + n] + (["..."] if k + 1 < len(pieces) else [])
        at = i + n
    return fresh, [line for line in output[at:] if line.strip()]


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
    ap.add_argument("--only", default=None, help="only the blocks whose names match this regular expression")
    ap.add_argument("--spread", action="store_true",
                    help="with --check: per block, how far the program's numbers moved from the page's (of the "
                         "numbers that changed: the largest relative change above the block's floor, the "
                         "largest value at or below it)")
    args = ap.parse_args()
    only = re.compile(args.only) if args.only else None

    cache, stale, seen, spread = {}, [], set(), {}
    pages = sorted({b["page"] for b in BLOCKS.values()})
    for page in pages:
        path = os.path.join(ROOT, page)
        lines, found = blocks_of(open(path, encoding="utf-8").read())
        for name, a, b in found:
            if name not in BLOCKS or BLOCKS[name]["page"] != page:
                sys.exit(f"error: {page}: unknown output block '{name}'")
            seen.add(name)
            if only and not only.search(name):
                continue
            spec = BLOCKS[name]
            want_re = re.compile(spec["compare"])
            fresh, after = excerpt(run(args.bin_dir, spec, cache), spec, lines[a:b], name)
            if spec.get("to_end", spec.get("prompt", False)) and after:
                stale.append(f"{page}:{b + 1}: block {name} ends before the program does: {len(after)} more "
                             f"line(s), the first: {after[0]}")
                if args.update and spec.get("whole"):
                    fresh += after
            page_cmp = [(k, l) for k, l in enumerate(lines[a:b]) if want_re.search(l)]
            fresh_cmp = [l for l in fresh if want_re.search(l)]
            if len(page_cmp) != len(fresh_cmp):
                stale.append(f"{page}: block {name}: {len(page_cmp)} compared lines on the page, "
                             f"{len(fresh_cmp)} in the program's output")
                continue
            for (k, old), new in zip(page_cmp, fresh_cmp):
                if args.spread:
                    measure_spread(name, old, new, spec, spread)
                if not same(old, new, spec.get("mask", []), floor=spec.get("floor"), rtol=spec.get("rtol")):
                    stale.append(f"{page}:{a + k + 1}: block {name}\n    page:    {old}\n    program: {new}")
                # --update writes what this run printed even where --check
                # would let the page's value pass (a difference at the
                # rounding floor): the page then shows one run's numbers, not
                # a mix of runs. Masked fields (timings) stay as pasted.
                if args.update and not spec.get("whole") and not same(old, new, spec.get("mask", []), exact=True):
                    lines[a + k] = new
            if args.update and spec.get("whole"):
                lines[a:b] = fresh
        if args.update:
            open(path, "w", encoding="utf-8").write("\n".join(lines))
    missing = sorted(set(BLOCKS) - seen)
    if missing:
        sys.exit(f"error: no mark for {', '.join(missing)} in the pages")
    stale += missing_figures()
    if args.spread:
        print(f"{'block':26} {'floor':>8} {'rtol':>8}   {'moved above floor':>18}   {'largest at floor':>16}")
        for name, (rel, low) in sorted(spread.items()):
            spec = BLOCKS[name]
            print(f"{name:26} {spec.get('floor', FP32_FLOOR):8.1e} {spec.get('rtol', FP32_RTOL):8.1e}   "
                  f"{rel:18.2e}   {low:16.2e}")
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
