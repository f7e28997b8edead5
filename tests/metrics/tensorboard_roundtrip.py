"""Reads a titan run's TensorBoard event file with the tensorboard package
and compares every scalar with the run's metrics.jsonl.

usage: tensorboard_roundtrip.py DUMP_FOLDER LOG_FREQ STEPS [TB_FOLDER] [RANK]

With RANK ([metrics] save_for_all_ranks) the event file is that rank's, in
TB_FOLDER/<run>/rank_RANK, and metrics.jsonl is still rank 0's: rank 0's
file is compared in full; another rank's must have every tag and step, the
job-wide values (loss, max loss, grad norm, lr) equal to the JSONL's, and
its own (throughput, times, memory) finite and not negative: they are
measured on that rank.

The JSONL holds one record per step (rates of that step alone); a TensorBoard
point is a log line, whose rates average over the steps since the previous
log line. So loss, grad_norm, lr and memory are compared with the log step's
record, and the rates with the interval recomputed from the per-step
records: tps, tflops and mfu weighted by step time (tokens / seconds),
times as means. Values must agree to float32 precision (TensorBoard's
simple_value is a float). Prints one line per tag; exits 1 on any mismatch.
"""
import glob
import json
import math
import os
import sys

import numpy as np
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

GIB = 1024.0**3


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def main():
    dump, log_freq, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    tb_folder = sys.argv[4] if len(sys.argv) > 4 else "tb"
    rank = int(sys.argv[5]) if len(sys.argv) > 5 else None
    pattern = ["*", "events.out.tfevents.*"] if rank is None else ["*", "rank_%d" % rank, "events.out.tfevents.*"]
    files = sorted(glob.glob(os.path.join(dump, tb_folder, *pattern)))
    if len(files) != 1:
        fail("expected exactly one event file (%s), found %d: %s" % (
            "rank 0 only" if rank is None else "rank_%d" % rank, len(files), files))
    path = files[0]
    print("event file:", os.path.relpath(path, dump), os.path.getsize(path), "bytes")

    acc = EventAccumulator(path, size_guidance={"scalars": 0})  # 0 = keep every point
    acc.Reload()
    if acc.file_version != 2.0:
        fail("file_version %r, want 2.0 (brain.Event:2)" % acc.file_version)

    lines = [json.loads(line) for line in open(os.path.join(dump, "metrics.jsonl"))]
    # Validation records ([validation]) carry validation_loss and no loss;
    # TensorBoard has them as validation/loss at their steps.
    records = [r for r in lines if "loss" in r]
    validation = {r["step"]: r["validation_loss"] for r in lines if "validation_loss" in r}
    by_step = {r["step"]: r for r in records}
    if [r["step"] for r in records] != list(range(1, steps + 1)):
        fail("metrics.jsonl steps %s, want 1..%d once each" % ([r["step"] for r in records], steps))
    log_steps = [s for s in range(1, steps + 1) if s == 1 or s % log_freq == 0 or s == steps]

    # What each log line should carry, from the JSONL.
    expected = {}
    prev = 0
    for s in log_steps:
        interval = [by_step[i] for i in range(prev + 1, s + 1)]
        prev = s
        r = by_step[s]
        secs = sum(x["step_time_s"] for x in interval)
        data = sum(x["data_time_s"] for x in interval)
        rate = lambda key: sum(x[key] * x["step_time_s"] for x in interval) / secs
        if r["max_loss"] < r["loss"] * (1 - 1e-7):
            fail("step %d: max_loss %r below the mean loss %r" % (s, r["max_loss"], r["loss"]))
        e = {
            "loss_metrics/global_avg_loss": r["loss"],
            "loss_metrics/global_max_loss": r["max_loss"],
            "grad_norm": r["grad_norm"],
            "lr": r["lr"],
            "throughput(tps)": rate("tps"),
            "time_metrics/end_to_end(s)": secs / len(interval),
            "time_metrics/data_loading(s)": data / len(interval),
            "time_metrics/data_loading(%)": 100.0 * data / secs,
        }
        if r["tflops"] > 0:
            e["tflops"] = rate("tflops")
        if r["mfu_pct"] > 0:
            e["mfu(%)"] = rate("mfu_pct")
        m = r.get("memory")
        if m is None:
            fail("metrics.jsonl step %d is a log step but has no memory reading" % s)
        e["memory/max_active(GiB)"] = m["max_allocated_bytes"] / GIB
        e["memory/max_reserved(GiB)"] = m["max_reserved_bytes"] / GIB
        if m["capacity_bytes"] > 0:
            e["memory/max_active(%)"] = 100.0 * m["max_allocated_bytes"] / m["capacity_bytes"]
            e["memory/max_reserved(%)"] = 100.0 * m["max_reserved_bytes"] / m["capacity_bytes"]
        e["memory/num_alloc_retries"] = m["num_alloc_retries"]
        e["memory/num_ooms"] = m["num_ooms"]
        expected[s] = e

    want_tags = sorted(set(t for e in expected.values() for t in e))
    got_tags = sorted(acc.Tags()["scalars"])
    if validation:
        if "validation/loss" not in got_tags:
            fail("metrics.jsonl has validation records but TensorBoard no validation/loss tag")
        points = acc.Scalars("validation/loss")
        if [p.step for p in points] != sorted(validation):
            fail("validation/loss at steps %s, want %s" % ([p.step for p in points], sorted(validation)))
        for p in points:
            if p.value != float(np.float32(validation[p.step])):
                fail("validation/loss step %d: tensorboard %.9g, jsonl %.9g" % (p.step, p.value, validation[p.step]))
        print("  %-30s steps %-14s last %-12.6g equal to metrics.jsonl" % (
            "validation/loss", ",".join(map(str, sorted(validation))), points[-1].value))
        got_tags.remove("validation/loss")
    if got_tags != want_tags:
        fail("tags %s, want %s" % (got_tags, want_tags))

    # A value copied from the record must be its float32 rounding exactly;
    # one recomputed here from per-step records (another summation order)
    # within a float32 ulp or two.
    copied = {"loss_metrics/global_avg_loss", "loss_metrics/global_max_loss", "grad_norm", "lr"}
    worst = 0.0
    for tag in want_tags:
        points = acc.Scalars(tag)
        steps_seen = [p.step for p in points]
        want_steps = [s for s in log_steps if tag in expected[s]]
        if steps_seen != want_steps:
            fail("%s at steps %s, want %s" % (tag, steps_seen, want_steps))
        tag_worst = 0.0
        for p in points:
            want = expected[p.step][tag]
            want32 = float(np.float32(want))
            if rank and tag not in copied:
                # Measured on that rank: only that it is a reading is known.
                ok = math.isfinite(p.value) and p.value >= 0
                rel = 0.0
            elif tag in copied or want == 0:
                ok = p.value == want32
                rel = 0.0 if ok else math.inf
            else:
                rel = abs(p.value - want) / abs(want)
                ok = rel <= 3 * 2.0**-24 * 4  # float32 rounding + a few double ulps of reordering
            if not ok:
                fail("%s step %d: tensorboard %.9g, jsonl %.9g (float32 %.9g)" % (tag, p.step, p.value, want, want32))
            tag_worst = max(tag_worst, rel)
        worst = max(worst, tag_worst)
        print("  %-30s steps %-14s last %-12.6g max rel diff %.2e" % (tag, ",".join(map(str, steps_seen)),
                                                                       points[-1].value, tag_worst))
    what = "match metrics.jsonl" if not rank else "on rank %d, the job-wide ones equal to metrics.jsonl" % rank
    print("OK: %d tags x %d log steps %s (max rel diff %.2e)" % (len(want_tags), len(log_steps), what, worst))


if __name__ == "__main__":
    main()
