"""Checkpoints survive any kill: SIGKILLs a training job from outside at
seeded random moments, restarts it with the same command, and checks every
time that the restart resumes from the last *complete* checkpoint and ends
with the same weights and optimizer moments, bitwise, as a run that was
never killed.

Each trial runs `titan train --nproc 2` (FSDP over 2 ranks) on a small model,
saving every 2 steps (keep_latest_k = 2), with one of the three save modes
(synchronous, async, async_with_pinned_mem) and one of these moments:

  random      a delay drawn uniformly over the uninterrupted run's length
  writing     as soon as step K's folder exists as step-K.partial: the ranks
              are writing their files
  committing  as soon as step-K.partial holds metadata.json (the commit's
              rename is next), or step-K appeared if the poll missed that
  committed   as soon as step-K exists: the rename just happened and rank 0
              may be pruning older checkpoints

The kill takes the whole job (launcher and ranks at once, a lost node) or
one rank (the launcher stops the other, as after a crashed process). No
fault hook in titan is used. After the kill the script itself reads the
folder: the expected resume step is the newest step-N holding metadata.json
with a full state (a leftover step-N.partial is not complete); the restart
must print "resumed from ... (step N)" (or start fresh when there is none)
and its final checkpoint must equal the uninterrupted run's, tensor by
tensor, byte by byte.

usage: kill_loop.py TITAN_BIN SOURCE_DIR [--trials N] [--seed S] [--keep]
Prints one row per trial and exits 0 when every trial resumed as expected
and ended bitwise equal.
"""
import argparse
import glob
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import numpy as np
from safetensors.numpy import load_file

MODES = ["disabled", "async", "async_with_pinned_mem"]
MOMENTS = ["random", "writing", "committing", "committed"]
STEPS = 10
INTERVAL = 2
SAVE_STEPS = list(range(INTERVAL, STEPS + 1, INTERVAL))


def job_command(titan, source, dump, mode):
    return [titan, "train", "--nproc", "2", "--job.config_file", f"{source}/train_configs/debug_model.toml",
            "--job.dump_folder", dump, "--training.device", "cpu", "--training.steps", str(STEPS),
            "--training.seq_len", "32", "--training.batch_size", "2", "--metrics.log_freq", "1",
            "--lr_scheduler.warmup_steps", "2", "--checkpoint.enable_checkpoint",
            "--checkpoint.interval", str(INTERVAL), "--checkpoint.keep_latest_k", "2",
            "--checkpoint.async_mode", mode, "--comm.timeout_seconds", "20"]


def start(cmd, log_path):
    log = open(log_path, "w")
    # Its own session: a whole-job kill is one killpg.
    return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True), log


def complete_steps(ckpt):
    """Steps whose folder holds metadata.json with the full training state."""
    steps = []
    for d in glob.glob(f"{ckpt}/step-*"):
        m = re.fullmatch(r"step-(\d+)", os.path.basename(d))
        meta = f"{d}/metadata.json"
        if not m or not os.path.isfile(meta):
            continue
        try:
            content = json.load(open(meta))["state"].get("content")
        except (ValueError, KeyError):
            continue  # a torn metadata.json would be a finding: the restart must then not pick it
        if content == "full":
            steps.append(int(m.group(1)))
    return sorted(steps)


def leftovers(ckpt):
    return sorted(os.path.basename(d) for d in glob.glob(f"{ckpt}/*") if not re.fullmatch(r"step-\d+", os.path.basename(d)))


def final_tensors(ckpt):
    """Every tensor of the final checkpoint, by rank file and name, as raw bytes."""
    out = {}
    for f in sorted(glob.glob(f"{ckpt}/step-{STEPS}/rank-*.safetensors")):
        for name, a in load_file(f).items():
            out[(os.path.basename(f), name)] = np.ascontiguousarray(a).view(np.uint8).tobytes()
    return out


def rank_pids(launcher_pid):
    """The launcher's children, with their RANK (from /proc)."""
    pids = []
    for stat in glob.glob("/proc/[0-9]*/stat"):
        try:
            fields = open(stat).read().rsplit(")", 1)[1].split()
            if int(fields[1]) != launcher_pid:
                continue
            pid = int(stat.split("/")[2])
            env = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
            if any(e.startswith(b"RANK=") for e in env):
                pids.append(pid)
        except (OSError, IndexError, ValueError):
            continue
    return pids


def wait_for(predicate, proc, limit_s):
    """Polls every 0.5 ms until predicate() or the job ended; returns what was seen."""
    t_end = time.monotonic() + limit_s
    while time.monotonic() < t_end:
        seen = predicate()
        if seen:
            return seen
        if proc.poll() is not None:
            return None
        time.sleep(0.0005)
    return None


def kill(proc, target, rng):
    """SIGKILL: the whole job, or one rank (the launcher then stops the other)."""
    if target == "job":
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        return "job"
    ranks = rank_pids(proc.pid)
    if not ranks:  # between launch and spawn, or already over: take the job
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        return "job"
    victim = rng.choice(ranks)
    os.kill(victim, signal.SIGKILL)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        return "rank (then job: the launcher did not end)"
    # Anything of the job still running (the launcher ended first) goes too.
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    return "rank"


def trial(i, args, rng, ref, ref_seconds, work):
    mode = MODES[i % len(MODES)]
    moment = MOMENTS[(i // len(MODES)) % len(MOMENTS)]
    target = "job" if rng.random() < 0.5 else "rank"
    k = rng.choice(SAVE_STEPS[:-1])  # the last save is the end of the run
    dump = f"{work}/trial{i:02d}"
    ckpt = f"{dump}/checkpoint"
    cmd = job_command(args.titan, args.source, dump, mode)
    proc, log = start(cmd, f"{work}/trial{i:02d}_killed.log")
    t0 = time.monotonic()
    if moment == "random":
        delay = rng.uniform(0.1, 0.95) * ref_seconds
        proc_ended = wait_for(lambda: None, proc, delay) is None and proc.poll() is not None
        seen = f"{delay:.2f} s" if not proc_ended else "ended first"
    elif moment == "writing":
        seen = wait_for(lambda: os.path.isdir(f"{ckpt}/step-{k}.partial") and f"step-{k}.partial", proc, 120)
    elif moment == "committing":
        seen = wait_for(lambda: (os.path.isfile(f"{ckpt}/step-{k}.partial/metadata.json") and "partial+metadata")
                        or (os.path.isdir(f"{ckpt}/step-{k}") and f"step-{k} (missed)"), proc, 120)
    else:
        seen = wait_for(lambda: os.path.isdir(f"{ckpt}/step-{k}") and f"step-{k}", proc, 120)
    killed_at = time.monotonic() - t0
    if proc.poll() is None:
        how = kill(proc, target, rng)
    else:
        how = "none (the job ended first)"
        seen = seen or "ended first"
    log.close()

    expected = complete_steps(ckpt)
    expect = expected[-1] if expected else None
    left = leftovers(ckpt)

    proc, log = start(cmd, f"{work}/trial{i:02d}_restart.log")
    rc = proc.wait(timeout=600)
    log.close()
    out = open(f"{work}/trial{i:02d}_restart.log").read()
    m = re.search(r"checkpoint: resumed from .* \(step (\d+)\)", out)
    resumed = int(m.group(1)) if m else None
    problems = []
    if rc != 0:
        problems.append(f"restart exited {rc}: " + " | ".join(l for l in out.splitlines() if "error" in l)[:300])
    if expect is not None and expect == STEPS:
        # The kill came after the final save: the restart finds the run done.
        pass
    elif resumed != expect:
        problems.append(f"resumed from step {resumed}, expected {expect}")
    if rc == 0:
        got = final_tensors(ckpt)
        if set(got) != set(ref):
            problems.append(f"final checkpoint holds {len(got)} tensors, the uninterrupted run {len(ref)}")
        else:
            differ = [name for key, name in ((key, key[1]) for key in ref) if got[key] != ref[key]]
            if differ:
                problems.append(f"{len(differ)} tensors differ from the uninterrupted run, e.g. {differ[0]}")
    row = (f"{i:5d}  {mode:<22} {moment:<10} {str(k) if moment != 'random' else '-':>3}  {how:<6} "
           f"{killed_at:6.2f} s  {str(seen):<18} {','.join(map(str, expected)) or 'none':<9} "
           f"{' '.join(left) or '-':<16} {'fresh' if resumed is None else resumed!s:>6}  "
           f"{'ok' if not problems else 'FAIL'}")
    print(row, flush=True)
    for p in problems:
        print(f"       ! {p}", flush=True)
    if not problems and not args.keep:
        shutil.rmtree(dump, ignore_errors=True)
    return not problems


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("titan")
    parser.add_argument("source")
    parser.add_argument("--trials", type=int, default=30)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--keep", action="store_true", help="keep every trial's folder")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    work = tempfile.mkdtemp(prefix="titan-kill-loop-")

    # The uninterrupted run (the save mode does not change the training).
    t0 = time.monotonic()
    proc, log = start(job_command(args.titan, args.source, f"{work}/reference", "disabled"), f"{work}/reference.log")
    rc = proc.wait(timeout=600)
    log.close()
    ref_seconds = time.monotonic() - t0
    if rc != 0:
        print(open(f"{work}/reference.log").read())
        sys.exit(f"kill_loop: the uninterrupted run failed (exit {rc})")
    ref = final_tensors(f"{work}/reference/checkpoint")
    if not ref:
        sys.exit("kill_loop: the uninterrupted run left no final checkpoint")
    print(f"uninterrupted run: {STEPS} steps, saves at {SAVE_STEPS} (keep_latest_k 2), {ref_seconds:.1f} s, "
          f"{len(ref)} tensors in its final checkpoint; seed {args.seed}, work folder {work}")
    print("trial  save mode              moment       K  kill   at        seen               complete  "
          "leftovers        resume  result")
    ok = sum(trial(i, args, rng, ref, ref_seconds, work) for i in range(args.trials))
    print(f"{ok} of {args.trials} trials resumed from the last complete checkpoint and ended bitwise equal "
          f"to the uninterrupted run")
    if ok == args.trials and not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    sys.exit(0 if ok == args.trials else 1)


if __name__ == "__main__":
    main()
