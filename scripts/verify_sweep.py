#!/usr/bin/env python3
"""Random layouts against one process: `titan verify` over drawn combinations.

Each trial draws a world size (2, 4 or 8 ranks), splits it into FSDP, HSDP
replicas, TP, CP and PP degrees, and draws the features that compose with
them (pipeline schedule and micro-batch size, layers per stage, activation
checkpointing mode, float8 recipe and its FSDP all-gather, async TP, loss
parallel, CP rotation and load balancer, block-causal attention, titan's
flash kernel, FSDP resharding, CPU offload, gradient accumulation, the
optimizer step in backward, clipping, a resume from a checkpoint saved
mid-run, synchronously or in the background, and [validation]'s held-out
loss). `titan verify` trains that layout
and one process on the same batches and compares every step; a trial
passes when it says so. The draws are seeded: trial k of seed S is always
the same layout, so a failure is rerun with the command printed for it.

    python3 scripts/verify_sweep.py --trials 40 --seed 1   # ~8 s a trial on 2 cores
    python3 scripts/verify_sweep.py --show 17 --seed 1     # only print trial 17's command

Exit status: 0 when every trial trained as one process, 1 when one
diverged or failed (its command is printed), 2 for bad arguments. A trial
whose numbers agree but whose communication differs from `titan verify`'s
analytic count (where the layout is counted) is a failure too, "COMM":
either titan sends what it should not or the count is wrong.
Layouts the trainer refuses are counted apart: the generator keeps to what
titan accepts, so a refusal is worth a look too, but it is not a wrong
result.
"""
import argparse
import os
import random
import shlex
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCHEDULES = ["1F1B", "GPipe", "Interleaved1F1B", "LoopedBFS", "InterleavedZeroBubble", "ZBVZeroBubble"]
MULTI_STAGE = {"Interleaved1F1B", "LoopedBFS", "InterleavedZeroBubble", "ZBVZeroBubble"}


def draw(rng):
    """One trial: (world size, flags, a short description)."""
    nproc = rng.choice([2, 4, 4, 8, 8])
    deg = {"pp": 1, "cp": 1, "tp": 1, "replicate": 1}
    rest = nproc
    for name in rng.sample(sorted(deg), len(deg)):
        if rest > 1 and rng.random() < 0.5:
            deg[name] = 2
            rest //= 2
    shard = rest
    flags = {
        "parallelism.data_parallel_shard_degree": shard,
        "parallelism.data_parallel_replicate_degree": deg["replicate"],
        "parallelism.tensor_parallel_degree": deg["tp"],
        "parallelism.context_parallel_degree": deg["cp"],
        "parallelism.pipeline_parallel_degree": deg["pp"],
    }
    words = [f"{nproc} ranks: dp_shard {shard}"]
    words += [f"{k} {v}" for k, v in deg.items() if v > 1]
    local_batch = rng.choice([2, 4])
    flags["training.local_batch_size"] = local_batch
    dp = shard * deg["replicate"]
    if rng.random() < 0.3:
        flags["training.global_batch_size"] = local_batch * dp * 2
        words.append("2 accumulation steps")
    if rng.random() < 0.2:
        flags["training.seq_len"] = rng.choice([64, 96])
    if deg["pp"] > 1:
        schedule = rng.choice(SCHEDULES)
        microbatch = 1 if local_batch == 2 else rng.choice([1, 2])
        flags["parallelism.pipeline_parallel_schedule"] = schedule
        flags["parallelism.pipeline_parallel_microbatch_size"] = microbatch
        words.append(f"{schedule} ({local_batch // microbatch} micro-batches)")
        if schedule in MULTI_STAGE and rng.random() < 0.3:
            # 6 layers, the ends counted one heavier: 1 per stage makes 8
            # stages, 2 makes 4 (ZBV runs exactly 2 per rank).
            per_stage = 2 if schedule == "ZBVZeroBubble" else rng.choice([1, 2])
            flags["parallelism.pipeline_parallel_layers_per_stage"] = per_stage
            words.append(f"{per_stage} layers per stage")
    async_tp = False
    if deg["tp"] > 1:
        if rng.random() < 0.5:
            flags["parallelism.disable_loss_parallel"] = "false"
            words.append("loss parallel")
        if rng.random() < 0.3:
            flags["parallelism.enable_async_tensor_parallel"] = "true"
            async_tp = True
            words.append("async TP")
    if deg["cp"] > 1:
        if rng.random() < 0.3:
            flags["parallelism.context_parallel_rotate_method"] = "alltoall"
            words.append("CP all-to-all")
        if rng.random() < 0.3:
            flags["parallelism.context_parallel_load_balancer"] = "contiguous"
            words.append("CP contiguous")
    ac = rng.choice(["none", "full", "selective 1", "selective 2", "selective op"])
    mode, _, option = ac.partition(" ")
    flags["activation_checkpoint.mode"] = mode
    if option:
        flags["activation_checkpoint.selective_ac_option"] = option
    if ac != "none":
        words.append(f"AC {ac}")
    if rng.random() < 0.25:
        recipe = "tensorwise" if async_tp else rng.choice(["tensorwise", "rowwise"])
        flags["float8.enable_float8_linear"] = "true"
        flags["quantize.linear.float8.recipe_name"] = recipe
        words.append(f"float8 {recipe}")
        if recipe == "tensorwise" and rng.random() < 0.5:
            flags["float8.enable_fsdp_float8_all_gather"] = "true"
            flags["float8.precompute_float8_dynamic_scale_for_fsdp"] = "true"
            words.append("float8 all-gather")
    if rng.random() < 0.2:
        flags["model.attn_type"] = "flash"
        words.append("flash kernel")
    if rng.random() < 0.2:
        flags["model.flavor"] = "debugmodel_flex_attn"
        words.append("block-causal")
    if rng.random() < 0.2:
        policy = rng.choice(["always", "never"])
        flags["parallelism.fsdp_reshard_after_forward"] = policy
        words.append(f"reshard {policy}")
    if rng.random() < 0.1:
        flags["training.enable_cpu_offload"] = "true"
        words.append("CPU offload")
    if rng.random() < 0.2:
        flags["training.max_norm"] = rng.choice(["0", "0.5"])
    # The step in backward: not with PP or DDP (refused as torchtitan does).
    if rng.random() < 0.15 and deg["pp"] == 1 and shard * deg["cp"] > 1:
        flags["optimizer.early_step_in_backward"] = "true"
        words.append("step in backward")
    # Drawn last, so that the draws above (and so every older trial's
    # layout) stay as they were.
    if rng.random() < 0.3 and deg["pp"] > 1 and shard * deg["cp"] > 1:
        flags["parallelism.fsdp_reduce_scatter_per_microbatch"] = "true"
        words.append("reduce-scatter per micro-batch")
    args = []
    for key, value in flags.items():
        args += [f"--{key}", str(value)]
    # A resume (titan verify --resume-at, of its 3 steps): the layout saves
    # a checkpoint, a new run loads it. Drawn after every key above.
    if rng.random() < 0.25:
        at = rng.choice([1, 2])
        mode = rng.choice(["disabled", "async", "async_with_pinned_mem"])
        args += ["--checkpoint.async_mode", mode, "--resume-at", str(at)]
        words.append(f"resumed after step {at}" + ("" if mode == "disabled" else f" ({mode} save)"))
    # [validation] after steps 1 and 2, its batches the training's shape
    # (what pipeline, context and sequence parallelism require).
    if rng.random() < 0.25:
        args += ["--validation.enable", "true", "--validation.freq", "2", "--validation.steps", "2",
                 "--validation.local_batch_size", str(local_batch),
                 "--validation.seq_len", str(flags.get("training.seq_len", 128))]
        words.append("validation")
    if "model.flavor" in flags:
        args += ["--flavor", "config"]  # verify's default model is the debug flavor
    return nproc, args, ", ".join(words)


def command(titan, nproc, args):
    return [titan, "verify", "--job.config_file", os.path.join(ROOT, "train_configs/debug_model.toml"),
            "--nproc", str(nproc)] + args


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--first", type=int, default=0, help="index of the first trial (to resume a sweep)")
    ap.add_argument("--show", type=int, default=None, help="print trial SHOW's command and exit")
    ap.add_argument("--titan", default=os.path.join(ROOT, "build/bin/titan"))
    ap.add_argument("--timeout", type=int, default=600, help="seconds per trial")
    opts = ap.parse_args()
    if opts.trials < 1 or opts.first < 0:
        print("verify_sweep: --trials must be >= 1 and --first >= 0", file=sys.stderr)
        return 2
    if opts.show is None and not os.access(opts.titan, os.X_OK):
        print(f"verify_sweep: no titan binary at {opts.titan} (build it, or pass --titan)", file=sys.stderr)
        return 2

    def trial(k):
        return draw(random.Random(f"{opts.seed}:{k}"))

    if opts.show is not None:
        nproc, args, what = trial(opts.show)
        print(f"# trial {opts.show} of seed {opts.seed}: {what}")
        print(shlex.join(command(opts.titan, nproc, args)))
        return 0

    counts = {"ok": 0, "DIVERGES": 0, "COMM": 0, "FAILED": 0, "refused": 0}
    failures = []
    print(f"{'trial':>5}  {'verdict':<9} {'time':>5}  layout")
    with tempfile.TemporaryDirectory(prefix="verify_sweep_") as scratch:
        for k in range(opts.first, opts.first + opts.trials):
            nproc, args, what = trial(k)
            cmd = command(opts.titan, nproc, args) + ["--job.dump_folder", os.path.join(scratch, str(k))]
            start = time.monotonic()
            try:
                p = subprocess.run(cmd, capture_output=True, text=True, timeout=opts.timeout)
                out, code = p.stdout + p.stderr, p.returncode
            except subprocess.TimeoutExpired:
                out, code = "timed out", -1
            seconds = time.monotonic() - start
            if code == 0 and "verdict: the layout trains as one process does" in out:
                # The numbers agree; the communication must match the
                # analytic count too wherever the layout is counted.
                verdict = "COMM" if "differs from the analytic count" in out else "ok"
            elif "diverges from one process" in out:
                verdict = "DIVERGES"
            elif code == 1 and "error:" in out and "1 process" not in out and "signal" not in out:
                verdict = "refused"  # a one-line error before any step: the trainer does not take the layout
            else:
                verdict = "FAILED"
            counts[verdict] += 1
            print(f"{k:>5}  {verdict:<9} {seconds:>4.0f}s  {what}", flush=True)
            if verdict == "COMM":
                differs = [line for line in out.splitlines() if "DIFFERS" in line or "by the count" in line]
                print("\n".join(f"       {line[:300]}" for line in differs[:4]), flush=True)
            elif verdict != "ok":
                errors = [line for line in out.splitlines() if "error" in line]
                print(f"       {(errors or out.splitlines()[-1:] or [''])[0][:300]}", flush=True)
            if verdict in ("DIVERGES", "COMM", "FAILED"):
                failures.append((k, cmd[:-2]))
    print(f"\n{opts.trials} trials of seed {opts.seed}: " + ", ".join(f"{v} {k}" for k, v in counts.items()))
    for k, cmd in failures:
        print(f"rerun trial {k}: {shlex.join(cmd)}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
