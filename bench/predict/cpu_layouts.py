#!/usr/bin/env python3
"""`titan predict --cluster.preset cpu` against `titan train` on this CPU.

For each layout below (one rank, DDP, FSDP, TP, PP and CP over two ranks)
the script trains a few steps of a small Llama on this machine, takes the
median step time of rank 0 after the first steps, asks `titan predict`
(with this machine's calibration: run `titan predict --calibrate` first)
for the same layout, and prints both, their ratio and whether the two
rank the layouts alike. The machine is shared and noisy: it runs each
layout `--rounds` times and keeps the median of the medians.

    python3 bench/predict/cpu_layouts.py [--titan build/bin/titan] [--rounds 2]
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODEL = ["--job.config_file", os.path.join(ROOT, "train_configs", "debug_model.toml"), "--model.dim", "512",
         "--model.n_heads", "8", "--model.n_kv_heads", "8", "--model.n_layers", "4", "--training.seq_len", "512",
         "--training.mixed_precision_param", "float32"]
LAYOUTS = [
    ("1 rank", 1, ["--training.batch_size", "8"]),
    ("DDP 2", 2, ["--training.batch_size", "4", "--training.data_parallel_replicate_degree", "2",
                  "--training.data_parallel_shard_degree", "1"]),
    ("FSDP 2", 2, ["--training.batch_size", "4"]),
    ("TP 2", 2, ["--training.batch_size", "8", "--training.tensor_parallel_degree", "2",
                 "--training.data_parallel_shard_degree", "1"]),
    ("PP 2 (1F1B, 8 micro-batches)", 2, ["--training.batch_size", "8", "--experimental.pipeline_parallel_degree", "2",
                                         "--training.data_parallel_shard_degree", "1"]),
    ("CP 2", 2, ["--training.batch_size", "8", "--training.context_parallel_degree", "2",
                 "--training.data_parallel_shard_degree", "1"]),
]
PREDICTED = re.compile(r"predicted: step ([0-9.]+) s")


def measured_step(titan, nproc, flags, steps, warmup):
    with tempfile.TemporaryDirectory(prefix="titan_predict_cpu_") as dump:
        cmd = [titan, "train", "--nproc", str(nproc), *MODEL, *flags, "--job.dump_folder", dump,
               "--training.device", "cpu", "--training.steps", str(steps), "--metrics.log_freq", str(steps),
               "--checkpoint.enable_checkpoint", "false", "--profiling.enable_profiling", "false",
               "--metrics.enable_tensorboard", "false"]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit("titan train failed: " + " ".join(cmd) + "\n" + r.stdout[-3000:] + r.stderr[-3000:])
        with open(os.path.join(dump, "metrics.jsonl")) as f:
            times = [json.loads(line)["step_time_s"] for line in f]
        return statistics.median(times[warmup:])


def predicted_step(titan, nproc, flags):
    cmd = [titan, "predict", "--cluster.preset", "cpu", "--nproc", str(nproc), *MODEL, *flags]
    r = subprocess.run(cmd, capture_output=True, text=True)
    m = PREDICTED.search(r.stdout)
    if r.returncode != 0 or not m:
        sys.exit("titan predict failed: " + " ".join(cmd) + "\n" + r.stdout + r.stderr)
    return float(m.group(1))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--titan", default=os.path.join(ROOT, "build", "bin", "titan"))
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--warmup", type=int, default=3, help="leading steps left out of the median")
    args = ap.parse_args()
    rows = []
    for name, nproc, flags in LAYOUTS:
        measured = statistics.median(measured_step(args.titan, nproc, flags, args.steps, args.warmup)
                                     for _ in range(args.rounds))
        predicted = predicted_step(args.titan, nproc, flags)
        rows.append((name, measured, predicted))
        print(f"{name:30s} measured {measured * 1e3:8.1f} ms   predicted {predicted * 1e3:8.1f} ms   "
              f"predicted / measured {predicted / measured:5.2f}", flush=True)
    by_measured = [r[0] for r in sorted(rows, key=lambda r: r[1])]
    by_predicted = [r[0] for r in sorted(rows, key=lambda r: r[2])]
    errors = [abs(r[2] / r[1] - 1) for r in rows]
    print(f"median |error| {100 * statistics.median(errors):.1f} %, largest {100 * max(errors):.1f} %")
    print("fastest to slowest, measured:  " + " < ".join(by_measured))
    print("fastest to slowest, predicted: " + " < ".join(by_predicted))


if __name__ == "__main__":
    main()
