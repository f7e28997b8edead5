#!/usr/bin/env python3
"""`titan predict` against runs that were measured: the table of
docs/predict.md, made here and checked by CTest (predict_published).

Each run below is a layout someone ran and timed: on one H200 by
scripts/gpu_check.sh (docs/gpu.md), or on H100s by torchtitan's team
(its repository's benchmarks/llama3_h100_202412_torchtitan.md, file A,
and benchmarks/asyncTP_llama3_h100_2025-06_torchtitan.md, file B). For each
the script runs `titan predict` with the run's layout and prints the
measured and predicted tokens/s per GPU and the error. A run marked
"calibrates" set a preset's efficiencies (predict/cluster.cpp); the
others are predictions.

    scripts/predict_check.py BIN_DIR            # print the table
    scripts/predict_check.py --check BIN_DIR    # exit 1 when docs/predict.md's table is stale or a claim fails
    scripts/predict_check.py --update BIN_DIR   # rewrite the table in docs/predict.md

The claims --check holds (docs/predict.md states them): every H200 run
within +-10 %; over torchtitan's runs titan can lay out, the median
|error| at most 15 %; and each published speed-up (async TP over sync,
interleaved 1F1B over 1F1B, float8 over bf16, fused kernels over op by
op) predicted with the right sign.
"""
import pathlib
import re
import statistics
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "predict.md"
BEGIN, END = "<!-- predict-table -->", "<!-- /predict-table -->"

BF16 = "--training.mixed_precision_param bfloat16 --training.seq_len 8192"
SAC = "--activation_checkpoint.mode selective --activation_checkpoint.selective_ac_option op"
F8 = "--float8.enable_float8_linear"
ASYNC = "--training.enable_async_tensor_parallel"
EAGER = "--model.fused_kernels false"  # torchtitan without torch.compile: op by op
H200 = f"--cluster.preset h200 {BF16} --training.batch_size 1"
TT = f"--cluster.preset h100_hbm2e_500w {BF16}"
T8_FSDP8 = f"{TT} --model.flavor 8B --nproc 8 --training.batch_size 2 {SAC}"
T8_FSDP128 = f"{TT} --model.flavor 8B --nproc 128 --training.batch_size 2 {SAC}"
T8_CP = f"{TT} --model.flavor 8B --nproc 8 --training.batch_size 1 --activation_checkpoint.mode full {F8}"
T70 = f"{TT} --model.flavor 70B --nproc 256 --training.batch_size 16 --training.tensor_parallel_degree 8 --activation_checkpoint.mode full"
T405 = (f"{TT} --model.flavor 405B --nproc 512 --training.batch_size 32 --training.tensor_parallel_degree 8 "
        f"--parallelism.pipeline_parallel_degree 8 --activation_checkpoint.mode full {F8} {ASYNC}")
T8_TP = f"{TT} --model.flavor 8B --nproc 64 --training.batch_size 12 --training.tensor_parallel_degree 8 {SAC}"

# (name, where it was measured, what ran, tokens/s per GPU measured, titan predict's arguments, role)
RUNS = [
    ("h200-8b4-fused", "docs/gpu.md", "8B-shaped, 4 blocks, fused kernels, 1 H200", 52688,
     f"{H200} --model.flavor 8B --model.n_layers 4", "calibrates"),
    ("h200-8b4-ops", "docs/gpu.md", "8B-shaped, 4 blocks, op by op, 1 H200", 48304,
     f"{H200} --model.flavor 8B --model.n_layers 4 {EAGER}", ""),
    ("h200-1b-ops", "docs/gpu.md", "1B, op by op, 1 H200", 41401, f"{H200} --model.flavor 1B {EAGER}", ""),
    ("A1", "file A, table 1", "8B, FSDP 8, eager", 5762, f"{T8_FSDP8} {EAGER}", "calibrates"),
    ("A2", "file A, table 1", "8B, FSDP 8, compile", 6667, T8_FSDP8, ""),
    ("A3", "file A, table 1", "8B, FSDP 8, compile, float8", 8532, f"{T8_FSDP8} {F8}", ""),
    ("A8", "file A, table 3", "8B, FSDP 128, eager", 5605, f"{T8_FSDP128} {EAGER}", ""),
    ("A9", "file A, table 3", "8B, FSDP 128, compile", 6514, T8_FSDP128, ""),
    ("A10", "file A, table 3", "8B, FSDP 128, compile, float8", 8380, f"{T8_FSDP128} {F8}", ""),
    ("A4", "file A, table 2", "8B, FSDP 8, seq 32k, full AC, float8", 3890,
     f"{T8_CP} --training.seq_len 32768", ""),
    ("A5", "file A, table 2", "8B, FSDP 4 x CP 2, seq 64k", 2540,
     f"{T8_CP} --training.seq_len 65536 --parallelism.context_parallel_degree 2", ""),
    ("A6", "file A, table 2", "8B, FSDP 2 x CP 4, seq 128k", 1071,
     f"{T8_CP} --training.seq_len 131072 --parallelism.context_parallel_degree 4", ""),
    ("A7", "file A, table 2", "8B, CP 8, seq 256k", 548,
     f"{T8_CP} --training.seq_len 262144 --parallelism.context_parallel_degree 8", ""),
    ("B19", "file B, 70B", "70B, FSDP 32 x TP 8, bf16", 597.3, T70, ""),
    ("B20", "file B, 70B", "70B, FSDP 32 x TP 8, bf16, async TP", 652.4, f"{T70} {ASYNC}", ""),
    ("A11", "file A, table 4", "70B, FSDP 32 x TP 8, float8", 829, f"{T70} {F8}", ""),
    ("A12", "file A, table 4", "70B, FSDP 32 x TP 8, float8, async TP", 876, f"{T70} {F8} {ASYNC}", ""),
    ("B21", "file B, 70B", "70B, FSDP 32 x TP 8, float8 tensorwise", 809.8, f"{T70} {F8}", ""),
    ("B22", "file B, 70B", "70B, FSDP 32 x TP 8, float8 tensorwise, async TP", 942.4, f"{T70} {F8} {ASYNC}", ""),
    ("B23", "file B, 70B", "70B, FSDP 32 x TP 8, float8 rowwise", 599.6,
     f"{T70} {F8} --float8.recipe_name rowwise", ""),
    ("B24", "file B, 70B", "70B, FSDP 32 x TP 8, float8 rowwise, async TP", 624.8,
     f"{T70} {F8} --float8.recipe_name rowwise {ASYNC}", ""),
    # torchtitan of December 2024 split a batch into as many micro-batches
    # as stages: 8 of 4 sequences (1F1B), 16 of 2 (interleaved, 2 stages a rank).
    ("A13", "file A, table 5", "405B, FSDP 8 x TP 8 x PP 8, 1F1B, 8 micro-batches", 100,
     f"{T405} --parallelism.pipeline_parallel_schedule 1F1B --parallelism.pipeline_parallel_microbatch_size 4", ""),
    ("A14", "file A, table 5", "405B, FSDP 8 x TP 8 x PP 8, interleaved 1F1B, 16 micro-batches", 128,
     f"{T405} --parallelism.pipeline_parallel_schedule Interleaved1F1B --parallelism.pipeline_parallel_microbatch_size 2",
     ""),
    ("B25", "file B, 8B", "8B, FSDP 8 x TP 8, per-op SAC, bf16", 4378, T8_TP, ""),
    ("B26", "file B, 8B", "8B, FSDP 8 x TP 8, per-op SAC, bf16, async TP", 4809.4, f"{T8_TP} {ASYNC}", ""),
]
# Published speed-ups: (faster run, slower run).
SPEEDUPS = [("B20", "B19"), ("A12", "A11"), ("B22", "B21"), ("B26", "B25"), ("A14", "A13"),
            ("A3", "A2"), ("A2", "A1"), ("h200-8b4-fused", "h200-8b4-ops")]
LINE = re.compile(r"predicted: step [0-9.]+ s, ([0-9,]+) tokens/s per GPU")


def predict(bin_dir, args):
    """tokens/s per GPU, or the one-line reason titan gives for no prediction."""
    r = subprocess.run([str(pathlib.Path(bin_dir) / "titan"), "predict"] + args.split(), capture_output=True,
                       text=True)
    m = LINE.search(r.stdout)
    if r.returncode == 0 and m:
        return float(m.group(1).replace(",", "")), ""
    reason = (r.stderr.strip() or r.stdout.strip()).splitlines()
    return None, reason[-1] if reason else f"exit {r.returncode}"


def short_reason(reason):
    if "does not fit" in reason:
        return "does not fit in titan (" + reason.split("does not fit: ")[1].split(" per GPU")[0] + " per GPU)"
    if "rowwise" in reason:
        return "refused by titan (rowwise float8 inside async TP)"
    return reason


def table(bin_dir):
    rows, results = [], {}
    rows.append("| run | source | layout | measured tokens/s per GPU | predicted | error |")
    rows.append("| --- | --- | --- | --- | --- | --- |")
    for name, source, what, measured, args, role in RUNS:
        tps, reason = predict(bin_dir, args)
        if tps is None:
            rows.append(f"| {name} | {source} | {what} | {measured:,} | {short_reason(reason)} | |")
            continue
        err = 100 * (tps / measured - 1)
        results[name] = (tps, measured, err, role)
        mark = " (calibrates)" if role else ""
        rows.append(f"| {name} | {source} | {what} | {measured:,} | {tps:,.0f} | {err:+.1f} %{mark} |")
    return "\n".join(rows) + "\n", results


def claims(results):
    """The failed claims, one line each."""
    failed = []
    for name, (tps, measured, err, role) in results.items():
        if name.startswith("h200") and abs(err) > 10:
            failed.append(f"{name}: {err:+.1f} % against the H200's measured {measured}, outside +-10 %")
    tt = [abs(e) for n, (_, _, e, role) in results.items() if not n.startswith("h200") and not role]
    if not tt or statistics.median(tt) > 15:
        failed.append(f"torchtitan's runs: median |error| {statistics.median(tt) if tt else float('nan'):.1f} % > 15 %")
    for fast, slow in SPEEDUPS:
        if fast in results and slow in results and not results[fast][0] > results[slow][0]:
            failed.append(f"{fast} is faster than {slow} as measured, not as predicted")
    return failed, (statistics.median(tt) if tt else float("nan"))


def main(argv):
    mode = "print"
    if argv and argv[0] in ("--check", "--update"):
        mode = argv.pop(0)[2:]
    if len(argv) != 1:
        sys.exit("usage: predict_check.py [--check|--update] BIN_DIR")
    text, results = table(argv[0])
    failed, median = claims(results)
    summary = f"median |error| over torchtitan's predicted runs: {median:.1f} %\n"
    if mode == "print":
        sys.stdout.write(text + "\n" + summary)
    doc = DOC.read_text()
    begin, end = doc.find(BEGIN), doc.find(END)
    if begin < 0 or end < 0:
        sys.exit(f"predict_check: {DOC} has no {BEGIN} ... {END} block")
    fresh = doc[:begin + len(BEGIN)] + "\n" + text + "\n" + summary + doc[end:]
    if mode == "update":
        DOC.write_text(fresh)
    for line in failed:
        print("predict_check: " + line)
    if mode == "check":
        if fresh != doc:
            print("predict_check: docs/predict.md's table is stale: run scripts/predict_check.py --update BIN_DIR")
            return 1
        print(summary.strip())
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
